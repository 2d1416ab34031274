/* Fuzz target: the tokens ingest reader over arbitrary bytes (the first
 * byte picks u16 or u32 tokens). */
#include "ingest_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return ingest_fuzz(size > 0 && (data[0] & 1) ? "tokens:u32:3" : "tokens:u16:5", data, size);
}
