/**
 * @file ptc.h
 * @brief Umbrella header of libptc: parallelizable tensor collections.
 *
 * Include this, or the module headers you need. Every module states its
 * thread-safety rules in its own header.
 */
#ifndef PTC_PTC_H
#define PTC_PTC_H

#include "ptc/error.h"
#include "ptc/dtype.h"
#include "ptc/box.h"
#include "ptc/config.h"
#include "ptc/rules.h"
#include "ptc/layout.h"
#include "ptc/store.h"
#include "ptc/safetensors.h"
#include "ptc/npy.h"
#include "ptc/export.h"
#include "ptc/dataset.h"
#include "ptc/view.h"
#include "ptc/mount.h"
#include "ptc/sched.h"
#include "ptc/search.h"
#include "ptc/search_store.h"

#endif
