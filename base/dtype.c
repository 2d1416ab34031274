/* The dtype table. Names are the safetensors spellings. */
#include <string.h>

#include "ptc/dtype.h"

static const struct {
    const char *name;
    size_t size;
    bool is_float;
} dtypes[PTC_DTYPE_COUNT] = {
    [PTC_DTYPE_BOOL] = {"BOOL", 1, false},
    [PTC_DTYPE_U8] = {"U8", 1, false},
    [PTC_DTYPE_I8] = {"I8", 1, false},
    [PTC_DTYPE_I16] = {"I16", 2, false},
    [PTC_DTYPE_U16] = {"U16", 2, false},
    [PTC_DTYPE_I32] = {"I32", 4, false},
    [PTC_DTYPE_U32] = {"U32", 4, false},
    [PTC_DTYPE_I64] = {"I64", 8, false},
    [PTC_DTYPE_U64] = {"U64", 8, false},
    [PTC_DTYPE_F16] = {"F16", 2, true},
    [PTC_DTYPE_BF16] = {"BF16", 2, true},
    [PTC_DTYPE_F32] = {"F32", 4, true},
    [PTC_DTYPE_F64] = {"F64", 8, true},
    [PTC_DTYPE_F8_E4M3] = {"F8_E4M3", 1, true},
    [PTC_DTYPE_F8_E5M2] = {"F8_E5M2", 1, true},
};

static bool valid(ptc_dtype dt)
{
    return (unsigned)dt < PTC_DTYPE_COUNT;
}

size_t ptc_dtype_size(ptc_dtype dt)
{
    return valid(dt) ? dtypes[dt].size : 0;
}

const char *ptc_dtype_name(ptc_dtype dt)
{
    return valid(dt) ? dtypes[dt].name : "?";
}

bool ptc_dtype_is_float(ptc_dtype dt)
{
    return valid(dt) && dtypes[dt].is_float;
}

int ptc_dtype_parse(const char *s, size_t len, ptc_dtype *out)
{
    for (int i = 0; i < PTC_DTYPE_COUNT; i++) {
        if (strlen(dtypes[i].name) == len && memcmp(dtypes[i].name, s, len) == 0) {
            *out = (ptc_dtype)i;
            return PTC_OK;
        }
    }
    return ptc_error_set(PTC_E_FORMAT, "unknown dtype '%.*s'", (int)(len > 32 ? 32 : len), s);
}
