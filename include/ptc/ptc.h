/**
 * @file ptc.h
 * @brief Umbrella header of libptc: parallelizable tensor collections.
 *
 * Include this, or the module headers you need. Every module states its
 * thread-safety rules in its own header.
 */
#ifndef PTC_PTC_H
#define PTC_PTC_H

/* base */
#include "ptc/error.h"
#include "ptc/dtype.h"
#include "ptc/box.h"
#include "ptc/transport.h"
/* kernels */
#include "ptc/crc32c.h"
#include "ptc/convert.h"
/* ptc/layout */
#include "ptc/config.h"
#include "ptc/rules.h"
#include "ptc/layout.h"
/* ptc/formats */
#include "ptc/safetensors.h"
#include "ptc/npy.h"
/* ptc/store */
#include "ptc/store.h"
#include "ptc/import.h"
#include "ptc/vfile.h"
/* ptc/ckpt */
#include "ptc/ckpt.h"
/* dataset */
#include "ptc/order.h"
#include "ptc/batch.h"
#include "ptc/step.h"
#include "ptc/ingest.h"
#include "ptc/dataset.h"
/* reshard */
#include "ptc/plan.h"
#include "ptc/reshard.h"
/* fuse */
#include "ptc/view.h"
#include "ptc/mount.h"
/* exec */
#include "ptc/sched.h"
#include "ptc/search.h"
#include "ptc/exec.h"
#include "ptc/exec_model.h"
#include "ptc/train.h"
#include "ptc/elastic.h"
#include "ptc/search_store.h"

#endif
