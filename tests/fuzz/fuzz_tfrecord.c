/* Fuzz target: the tfrecord ingest reader over arbitrary bytes. */
#include "ingest_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return ingest_fuzz("tfrecord", data, size);
}
