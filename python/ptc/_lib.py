"""libptc through ctypes (ABI mode): the loader, the C structs and the table
of the functions the package calls.

The library is found, in order:
  1. the path in the environment variable PTC_LIB (a file, or a folder
     holding libptc.so);
  2. the copy bundled in the installed package (ptc/libptc.so);
  3. the build tree of a source checkout (build/libptc.so next to python/,
     or the folder in PTC_BUILD).

Every function is bound by its exported name with its argument and result
types from include/ptc/*.h, so a header change that renames or retypes a
function breaks loudly here rather than silently at a call. The struct
layouts below mirror the headers field for field; tests/python/
test_abi.py compiles a C program against the headers and compares every
size and offset with these definitions.

Functions marked optional (``_OPTIONAL``) may be absent from an older or
newer library; calling one that is absent raises UnsupportedError.
"""

import ctypes
import os
import threading
from typing import Any, Dict, Mapping, Optional, Union
from ctypes import (POINTER, Structure, c_bool, c_char, c_char_p, c_double, c_int, c_int64,
                    c_long, c_size_t, c_uint, c_uint32, c_uint64, c_void_p)

from . import _errors

MAX_DIMS = 8
CONFIG_MAX_STAGES = 1024
RULES_MAX_BLOCKS = 64
DATASET_NAME_MAX = 255
DATASET_FORMAT_MAX = 63
STORE_ALL_VERSIONS = (1 << 64) - 1

# enum values of the headers
STORE_CREATE = 1 << 0
STORE_READONLY = 1 << 1
CODEC_NONE = 0
CODEC_ZSTD = 1
CONFIG_STYLE_KEYS = 0
CONFIG_STYLE_PATH = 1
TP_REPLICATE = 0
KIND_PARAM = 0
DTYPE_COUNT = 15          # PTC_DTYPE_COUNT == PTC_DTYPE_KEEP == PTC_RESHARD_DTYPE_KEEP
# ckpt.h
CKPT_RECORD_FORMAT = 1
CKPT_RNG_MAX = 4 << 20
CKPT_EXTRA_MAX = 4096
CKPT_PARENT_LATEST = (1 << 64) - 1
# step.h
DATASET_STEP_PATH_MAX = 256
DATASET_STEP_LEVEL_RANK = 7    # ptc_dataset_step_level: .../rank-<R>
DATASET_STEP_LEVEL_FILE = 8    # .../rank-<R>/step-<K>
DATASET_STEP_LEVEL_INDEX = 9   # .../rank-<R>/step-<K>.idx


# ---- structs (include/ptc/*.h) ---------------------------------------------------------

class Box(Structure):
    _fields_ = [("ndim", c_int), ("lo", c_int64 * MAX_DIMS), ("hi", c_int64 * MAX_DIMS)]


class Piece(Structure):
    _fields_ = [("box", Box), ("local_offset", c_int64),
                ("local_stride", c_int64 * MAX_DIMS)]


class Config(Structure):
    _fields_ = [("dp", c_int), ("tp", c_int), ("pp", c_int), ("zero", c_bool),
                ("nlayers", c_int), ("layers", c_uint32 * CONFIG_MAX_STAGES)]


class VersionInfo(Structure):
    _fields_ = [("version", c_uint64), ("parent", c_uint64), ("created_unix_ns", c_int64),
                ("step", c_char_p), ("config", c_char_p), ("rules", c_char_p),
                ("metadata_json", c_char_p), ("tensor_count", c_uint64), ("bytes", c_uint64),
                ("stored_bytes", c_uint64)]


class StoreTensor(Structure):
    _fields_ = [("name", c_char_p), ("name_len", c_size_t), ("dtype", c_int), ("ndim", c_int),
                ("shape", c_int64 * MAX_DIMS), ("placement", c_char_p), ("nshards", c_size_t)]


class TensorInfo(Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("ndim", c_int),
                ("shape", c_int64 * MAX_DIMS)]


class Shard(Structure):
    _fields_ = [("present", c_bool), ("flat", c_bool), ("ndim", c_int),
                ("shape", c_int64 * MAX_DIMS), ("flat_lo", c_int64), ("flat_hi", c_int64),
                ("npieces", c_size_t), ("owner", c_int)]


class Placement(Structure):
    _fields_ = [("tp", c_int), ("dim", c_int), ("nblocks", c_int), ("blocks_equal", c_bool),
                ("blocks", c_int64 * RULES_MAX_BLOCKS), ("pp", c_int), ("layer", c_int64),
                ("kind", c_int), ("rule", c_int), ("nheads", c_int),
                ("heads", c_int64 * RULES_MAX_BLOCKS), ("kv", c_uint64), ("head_dim", c_int64),
                ("cut", c_bool)]


class RulesParam(Structure):
    _fields_ = [("name", c_char_p), ("value", c_int64)]


PROGRESS_FN = ctypes.CFUNCTYPE(None, c_char_p, c_uint64, c_uint64, c_void_p)


class ImportOptions(Structure):
    _fields_ = [("step", c_char_p), ("codec", c_uint), ("level", c_int),
                ("progress", PROGRESS_FN), ("progress_user", c_void_p)]


class PlanOptions(Structure):
    _fields_ = [("hosts", c_int), ("src_host", POINTER(c_int)), ("dst_host", POINTER(c_int)),
                ("no_reuse", c_bool), ("figures_only", c_bool), ("src_proc", POINTER(c_int)),
                ("dst_proc", POINTER(c_int)), ("proc", c_int)]


class PlanStats(Structure):
    _fields_ = [("bytes_total", c_uint64), ("bytes_reused", c_uint64),
                ("bytes_local_copy", c_uint64), ("bytes_network", c_uint64),
                ("bytes_network_lower_bound", c_uint64), ("max_rank_send", c_uint64),
                ("max_rank_recv", c_uint64), ("bytes_host_copy", c_uint64),
                ("bytes_fanout", c_uint64), ("tensors", c_uint64), ("shards", c_uint64),
                ("shards_reused", c_uint64), ("transfers", c_uint64), ("hosts", c_int),
                ("plan_seconds", c_double)]


class PlanHostStats(Structure):
    _fields_ = [("bytes_in", c_uint64), ("bytes_out", c_uint64), ("bytes_need", c_uint64),
                ("bytes_have", c_uint64), ("bytes_copy", c_uint64)]


class ReshardOptions(Structure):
    _fields_ = [("step", c_char_p), ("threads", c_int), ("dtype", c_int), ("codec", c_uint),
                ("level", c_int), ("hosts", c_int), ("mpi_budget", c_uint64)]


class ReshardResult(Structure):
    _fields_ = [("version", c_uint64), ("parent", c_uint64), ("plan", PlanStats),
                ("bytes_written", c_uint64), ("shards_written", c_uint64),
                ("shards_reused", c_uint64), ("shards_aliased", c_uint64),
                ("seconds", c_double), ("rounds", c_uint64), ("max_round_bytes", c_uint64)]


class GcStats(Structure):
    _fields_ = [("files_removed", c_uint64), ("bytes_removed", c_uint64),
                ("dirs_removed", c_uint64)]


class DatasetInfo(Structure):
    _fields_ = [("name", c_char * (DATASET_NAME_MAX + 1)),
                ("format", c_char * (DATASET_FORMAT_MAX + 1)), ("id", c_uint64),
                ("samples", c_uint64), ("bytes", c_uint64), ("stored_bytes", c_uint64),
                ("created_unix_ns", c_int64), ("codec", c_uint), ("data_offset", c_uint64),
                ("data_raw", c_bool)]


class DatasetIngestOptions(Structure):
    _fields_ = [("codec", c_uint), ("level", c_int), ("replace", c_bool),
                ("progress", PROGRESS_FN), ("progress_user", c_void_p)]


class DatasetBatchPolicy(Structure):
    _fields_ = [("policy", c_uint), ("batch", c_uint64), ("start", c_uint64), ("dp", c_uint64)]


class AuditResult(Structure):
    _fields_ = [("samples", c_uint64), ("once", c_uint64), ("repeated", c_uint64),
                ("missing", c_uint64), ("dropped", c_uint64)]


class Order(Structure):
    _fields_ = [("n", c_uint64), ("seed", c_uint64), ("epoch", c_uint64), ("half", c_uint32),
                ("mask", c_uint64)]


class DatasetStep(Structure):
    _fields_ = [("seed", c_uint64), ("epoch", c_uint64), ("batch", c_uint64),
                ("start", c_uint64), ("dp", c_uint64), ("rank", c_uint64), ("step", c_uint64),
                ("policy", c_uint)]


class ViewStat(Structure):
    _fields_ = [("is_dir", c_bool), ("size", c_uint64)]


class ViewStoreOptions(Structure):
    _fields_ = [("vfile_cache", c_size_t), ("block_cache", c_uint64), ("source", c_void_p),
                ("source_user", c_void_p)]


class CkptKv(Structure):
    _fields_ = [("key", c_char_p), ("value", c_char_p)]


class CkptRecord(Structure):
    _fields_ = [("format", c_uint32), ("step", c_uint64), ("config", c_char_p),
                ("schedule", c_char_p), ("seed", c_uint64), ("epoch", c_uint64),
                ("sample", c_uint64), ("global_batch", c_uint64), ("dataset", c_char_p),
                ("has_loss", c_bool), ("loss", c_double), ("rng", c_void_p),
                ("rng_len", c_size_t), ("extra", POINTER(CkptKv)), ("nextra", c_size_t)]


# ckpt.h: the callbacks of a ptc_ckpt_stream (device tensors through host buffers)
STREAM_PLAN_FN = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(c_void_p), POINTER(c_uint64),
                                  c_size_t)
STREAM_PULL_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_uint64, c_size_t,
                                  POINTER(c_void_p))
STREAM_RELEASE_FN = ctypes.CFUNCTYPE(None, c_void_p, c_void_p, c_uint64, c_size_t)
STREAM_ACQUIRE_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_uint64, c_size_t,
                                     POINTER(c_void_p))
STREAM_PUSH_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_uint64, c_size_t)


class CkptStream(Structure):
    _fields_ = [("chunk", c_size_t), ("plan", STREAM_PLAN_FN), ("pull", STREAM_PULL_FN),
                ("release", STREAM_RELEASE_FN), ("acquire", STREAM_ACQUIRE_FN),
                ("push", STREAM_PUSH_FN), ("user", c_void_p)]


class CkptOptions(Structure):
    _fields_ = [("parent", c_uint64), ("codec", c_uint), ("level", c_int),
                ("no_reuse", c_bool), ("ignore_extra", c_bool), ("threads", c_int),
                ("stream", POINTER(CkptStream)), ("collectives_in_caller", c_bool),
                ("rules", c_void_p)]


# transport.h: the callbacks of a ptc_transport
ALLGATHER_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t, c_void_p)
GATHER_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t, c_void_p, c_int)
BROADCAST_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t, c_int)
BARRIER_FN = ctypes.CFUNCTYPE(c_int, c_void_p)
EXCHANGE_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_size_t, c_void_p, c_void_p, c_void_p,
                               c_size_t, c_void_p, c_void_p, c_void_p)


class Transport(Structure):
    _fields_ = [("rank", c_int), ("size", c_int), ("allgather", ALLGATHER_FN),
                ("gather", GATHER_FN), ("broadcast", BROADCAST_FN), ("barrier", BARRIER_FN),
                ("user", c_void_p), ("exchange", EXCHANGE_FN)]  # exchange: NULL (all-gather)


class CkptHostsOptions(Structure):
    _fields_ = [("replicas", c_int), ("keep", c_int), ("pin", c_uint64), ("last", c_bool)]


class ReshardHostsResult(Structure):
    _fields_ = [("version", c_uint64), ("hosts", c_int), ("plan", PlanStats),
                ("max_host_bytes", c_uint64), ("bytes_read", c_uint64), ("seconds", c_double),
                ("read_seconds", c_double), ("move_seconds", c_double), ("rounds", c_uint64),
                ("source_peak_bytes", c_uint64)]


class CkptLocal(Structure):
    _fields_ = [("name", c_char_p), ("rank", c_int), ("dtype", c_int), ("ndim", c_int),
                ("shape", c_int64 * MAX_DIMS), ("has_global", c_bool), ("global_ndim", c_int),
                ("global_shape", c_int64 * MAX_DIMS), ("has_box", c_bool), ("box", Box),
                ("data", c_void_p), ("streamed", c_bool), ("pieces", POINTER(Piece)),
                ("npieces", c_size_t)]


# Every struct the ABI test checks against the C headers: Python name -> C type name.
STRUCTS = {
    "Box": "ptc_box", "Piece": "ptc_piece", "Config": "ptc_config",
    "VersionInfo": "ptc_version_info", "StoreTensor": "ptc_store_tensor",
    "TensorInfo": "ptc_tensor_info", "Shard": "ptc_shard", "Placement": "ptc_placement",
    "RulesParam": "ptc_rules_param",
    "ImportOptions": "ptc_import_options", "PlanOptions": "ptc_plan_options",
    "PlanStats": "ptc_plan_stats", "PlanHostStats": "ptc_plan_host_stats",
    "ReshardOptions": "ptc_reshard_options", "ReshardResult": "ptc_reshard_result",
    "GcStats": "ptc_store_gc_stats", "DatasetInfo": "ptc_store_dataset_info",
    "DatasetIngestOptions": "ptc_dataset_ingest_options",
    "AuditResult": "ptc_dataset_audit_result", "Order": "ptc_order",
    "DatasetBatchPolicy": "ptc_dataset_batch_policy", "DatasetStep": "ptc_dataset_step",
    "ViewStat": "ptc_view_stat", "ViewStoreOptions": "ptc_view_store_options",
    "CkptKv": "ptc_ckpt_kv", "CkptRecord": "ptc_ckpt_record",
    "CkptOptions": "ptc_ckpt_options", "Transport": "ptc_transport",
    "CkptHostsOptions": "ptc_ckpt_hosts_options",
    "ReshardHostsResult": "ptc_reshard_hosts_result",
    "CkptLocal": "ptc_ckpt_local", "CkptStream": "ptc_ckpt_stream",
}

# ---- the function table ---------------------------------------------------------------

P = c_void_p            # opaque handles
PP = POINTER(c_void_p)  # out-parameters receiving a handle
u64p = POINTER(c_uint64)

# name: (restype, argtypes). Types follow include/ptc/*.h.
FUNCTIONS = {
    # error.h
    "ptc_strerror": (c_char_p, [c_int]),
    "ptc_last_error": (c_char_p, []),
    "ptc_error_clear": (None, []),
    # variadic in C; bound with the format alone (callers escape '%')
    "ptc_error_set": (c_int, [c_int, c_char_p]),
    "ptc_version": (c_char_p, []),
    "ptc_log_set": (None, [c_void_p, c_void_p, c_int]),   # fn: a LOG_FN (see _install_log)
    "ptc_fault_alloc_at": (None, [c_long]),
    "ptc_fault_write_at": (None, [c_long, c_int]),
    # dtype.h
    "ptc_dtype_size": (c_size_t, [c_int]),
    "ptc_dtype_name": (c_char_p, [c_int]),
    "ptc_dtype_parse": (c_int, [c_char_p, c_size_t, POINTER(c_int)]),
    # config.h
    "ptc_config_parse": (c_int, [POINTER(Config), c_char_p]),
    "ptc_config_format": (c_int, [POINTER(Config), c_int, c_char_p, c_size_t]),
    "ptc_config_world": (c_int, [POINTER(Config)]),
    "ptc_config_coords": (None, [POINTER(Config), c_int, POINTER(c_int), POINTER(c_int),
                                 POINTER(c_int)]),
    # rules.h
    "ptc_rules_parse": (c_int, [PP, c_char_p, c_size_t, c_char_p]),
    "ptc_rules_load": (c_int, [PP, c_char_p]),
    "ptc_rules_parse_params": (c_int, [PP, c_char_p, c_size_t, c_char_p, POINTER(RulesParam),
                                       c_size_t]),
    "ptc_rules_load_params": (c_int, [PP, c_char_p, POINTER(RulesParam), c_size_t]),
    "ptc_rules_params_read": (c_int, [c_char_p, POINTER(POINTER(RulesParam)),
                                      POINTER(c_size_t)]),
    "ptc_rules_params_free": (None, [POINTER(RulesParam), c_size_t]),
    "ptc_rules_missing_params": (c_char_p, [P]),
    "ptc_rules_destroy": (None, [P]),
    "ptc_rules_preset_names": (POINTER(c_char_p), []),
    "ptc_rules_text": (c_char_p, [P]),
    "ptc_rules_resolve": (c_int, [P, c_char_p, POINTER(Placement)]),
    "ptc_placement_format": (c_int, [POINTER(Placement), c_char_p, c_size_t]),
    # layout.h
    "ptc_layout_create": (c_int, [PP, POINTER(TensorInfo), c_size_t, P, POINTER(Config)]),
    "ptc_layout_destroy": (None, [P]),
    "ptc_layout_count": (c_size_t, [P]),
    "ptc_layout_config": (POINTER(Config), [P]),
    "ptc_layout_tensor": (POINTER(TensorInfo), [P, c_size_t]),
    "ptc_layout_placement": (POINTER(Placement), [P, c_size_t]),
    "ptc_layout_find": (c_int, [P, c_char_p, POINTER(c_size_t)]),
    "ptc_layout_shard": (c_int, [P, c_size_t, c_int, POINTER(Shard)]),
    "ptc_layout_pieces": (c_int, [P, c_size_t, c_int, POINTER(Piece), c_size_t,
                                  POINTER(c_size_t)]),
    "ptc_layout_nlayers": (c_int64, [P]),
    # layout.h: explicit layouts (layouts read from DTensors)
    "ptc_layout_is_explicit": (c_bool, [P]),
    "ptc_layout_world": (c_int, [P]),
    "ptc_layout_describe": (c_int, [P, c_char_p, c_size_t]),
    "ptc_layout_of_version_rules": (c_int, [PP, P, POINTER(Config), P]),
    # store.h
    "ptc_store_open": (c_int, [PP, c_char_p, c_uint]),
    "ptc_store_close": (None, [P]),
    "ptc_store_free": (None, [c_void_p]),
    "ptc_store_versions": (c_int, [P, POINTER(POINTER(VersionInfo)), POINTER(c_size_t)]),
    "ptc_store_versions_free": (None, [POINTER(VersionInfo), c_size_t]),
    "ptc_store_latest": (c_int, [P, u64p]),
    "ptc_store_reader_open": (c_int, [PP, P, c_uint64]),
    "ptc_store_reader_close": (None, [P]),
    "ptc_store_reader_version": (POINTER(VersionInfo), [P]),
    "ptc_store_reader_tensor_count": (c_size_t, [P]),
    "ptc_store_reader_tensor": (c_int, [P, c_size_t, POINTER(StoreTensor)]),
    "ptc_store_reader_find": (c_int, [P, c_char_p, c_size_t, POINTER(c_size_t)]),
    "ptc_store_reader_read_box": (c_int, [P, c_size_t, POINTER(Box), c_void_p,
                                          POINTER(c_int64)]),
    "ptc_store_verify": (c_int, [P, c_uint64, PROGRESS_FN, c_void_p]),
    "ptc_store_gc": (c_int, [P, POINTER(GcStats)]),
    "ptc_store_set_lock_timeout": (c_int, [P, c_int64]),
    "ptc_store_info_json": (c_int, [P, c_uint64, c_uint, POINTER(c_void_p)]),
    "ptc_store_datasets": (c_int, [P, POINTER(POINTER(DatasetInfo)), POINTER(c_size_t)]),
    "ptc_store_dataset_stat": (c_int, [P, c_char_p, POINTER(DatasetInfo)]),
    "ptc_store_dataset_name_ok": (c_bool, [c_char_p]),
    # export.h
    "ptc_import": (c_int, [P, POINTER(c_char_p), c_size_t, POINTER(Config), P,
                           POINTER(ImportOptions), u64p]),
    "ptc_layout_of_version": (c_int, [PP, P, POINTER(Config)]),
    "ptc_vfile_whole": (c_int, [PP, P, c_int]),
    "ptc_vfile_rank": (c_int, [PP, P, P, c_int, c_int]),
    "ptc_vfile_destroy": (None, [P]),
    "ptc_vfile_size": (c_uint64, [P]),
    "ptc_vfile_read": (c_int, [P, c_void_p, c_uint64, c_size_t, POINTER(c_size_t)]),
    "ptc_vfile_write": (c_int, [P, c_char_p, PROGRESS_FN, c_void_p]),
    # reshard.h
    "ptc_plan_create": (c_int, [PP, P, P, POINTER(PlanOptions)]),
    "ptc_plan_destroy": (None, [P]),
    "ptc_plan_stats_get": (None, [P, POINTER(PlanStats)]),
    "ptc_plan_host_stats_get": (c_int, [P, c_int, POINTER(PlanHostStats)]),
    "ptc_reshard_options_init": (None, [POINTER(ReshardOptions)]),
    "ptc_reshard_store": (c_int, [P, c_uint64, POINTER(Config), POINTER(ReshardOptions),
                                  POINTER(ReshardResult)]),
    # dataset.h
    "ptc_order_init": (c_int, [POINTER(Order), c_uint64, c_uint64, c_uint64]),
    "ptc_order_sample": (c_int, [POINTER(Order), c_uint64, u64p]),
    "ptc_batch_steps": (c_int, [c_uint64, c_uint64, c_uint64, u64p]),
    "ptc_batch_part": (c_int, [c_uint64, c_uint64, c_uint64, c_uint64, c_uint64, c_uint64,
                               u64p, u64p]),
    "ptc_batch_policy_parse": (c_int, [c_char_p, POINTER(c_uint)]),
    "ptc_batch_steps_policy": (c_int, [c_uint64, c_uint64, c_uint64, c_uint, u64p]),
    "ptc_batch_part_policy": (c_int, [c_uint64, c_uint64, c_uint64, c_uint64, c_uint64,
                                      c_uint64, c_uint, u64p, u64p]),
    "ptc_dataset_step_format": (c_int, [POINTER(DatasetStep), c_int, c_char_p, c_size_t]),
    "ptc_dataset_step_range": (c_int, [c_uint64, POINTER(DatasetStep), POINTER(c_uint64),
                                       POINTER(c_uint64)]),
    "ptc_dataset_step_ids": (c_int, [c_uint64, POINTER(DatasetStep), POINTER(c_uint64),
                                     c_uint64, POINTER(c_uint64)]),
    "ptc_dataset_ingest": (c_int, [P, c_char_p, c_char_p, POINTER(c_char_p), c_size_t,
                                   POINTER(DatasetIngestOptions), u64p]),
    "ptc_dataset_audit": (c_int, [P, c_char_p, c_uint64, c_uint64, POINTER(AuditResult)]),
    "ptc_dataset_audit_policy": (c_int, [P, c_char_p, c_uint64, c_uint64,
                                         POINTER(DatasetBatchPolicy), POINTER(AuditResult)]),
    "ptc_dataset_counter_create": (c_int, [PP, P]),
    "ptc_dataset_counter_add": (c_int, [P, c_char_p, c_uint64, c_uint64, c_uint64, c_uint64]),
    "ptc_dataset_counter_flush": (c_int, [P]),
    "ptc_dataset_counter_destroy": (None, [P]),
    # view.h
    "ptc_view_store_create": (c_int, [PP, c_char_p, POINTER(ViewStoreOptions)]),
    "ptc_view_store_view": (P, [P]),
    "ptc_view_store_attach": (c_int, [P, P, c_bool]),
    "ptc_view_store_flush": (c_int, [P]),
    "ptc_view_store_destroy": (None, [P]),
    "ptc_view_stat_path": (c_int, [P, c_char_p, POINTER(ViewStat)]),
    "ptc_view_pread": (c_int, [P, c_char_p, c_uint64, c_void_p, c_size_t, POINTER(c_size_t)]),
    # transport.h and ckpt.h: ptc.save / ptc.load hand libptc a transport over
    # torch.distributed (ptc._transport) and the described local tensors; the
    # protocol is libptc's (ptc_ckpt_save_locals_over / _load_locals_over)
    "ptc_transport_self": (None, [POINTER(Transport)]),
    "ptc_ckpt_options_init": (None, [POINTER(CkptOptions)]),
    "ptc_ckpt_record_free": (None, [POINTER(CkptRecord)]),
    "ptc_ckpt_record_to_json": (c_int, [POINTER(CkptRecord), POINTER(c_void_p)]),
    "ptc_ckpt_record_from_json": (c_int, [c_char_p, c_size_t, POINTER(CkptRecord)]),
    "ptc_ckpt_read_record": (c_int, [P, c_uint64, POINTER(CkptRecord)]),
    "ptc_ckpt_collect_over": (c_int, [POINTER(Transport), POINTER(c_int), c_size_t,
                                      POINTER(CkptLocal), c_size_t, POINTER(Config), P, PP]),
    "ptc_ckpt_save_locals_over": (c_int, [POINTER(Transport), c_int, P, POINTER(c_int),
                                          c_size_t, POINTER(CkptLocal), c_size_t,
                                          POINTER(Config), P, POINTER(CkptRecord),
                                          POINTER(CkptOptions), u64p]),
    "ptc_ckpt_load_locals_over": (c_int, [POINTER(Transport), c_int, P, c_uint64,
                                          POINTER(c_int), c_size_t, POINTER(CkptLocal),
                                          c_size_t, POINTER(Config), POINTER(CkptOptions),
                                          POINTER(CkptRecord), u64p]),
    # a store spread over hosts (ptc.save / ptc.load with across_hosts=True):
    # libptc numbers the hosts, saves each host's part and loads by the plan
    "ptc_ckpt_hosts_options_init": (None, [POINTER(CkptHostsOptions)]),
    "ptc_reshard_hosts_save_locals": (c_int, [POINTER(Transport), c_int, c_char_p, P,
                                              POINTER(c_int), c_size_t, POINTER(CkptLocal),
                                              c_size_t, POINTER(Config), P, POINTER(CkptRecord),
                                              POINTER(CkptOptions), POINTER(CkptHostsOptions),
                                              u64p]),
    "ptc_reshard_hosts_load_locals": (c_int, [POINTER(Transport), c_int, c_char_p, P, c_uint64,
                                              POINTER(c_int), c_size_t, POINTER(CkptLocal),
                                              c_size_t, POINTER(Config), P, POINTER(CkptRecord),
                                              POINTER(ReshardHostsResult)]),
    # ptc.async_save: the snapshot is the package's (ptc._async), the
    # protocol runs on libptc's thread over a process group of its own
    "ptc_ckpt_save_locals_async": (c_int, [PP, POINTER(Transport), c_int, P, POINTER(c_int),
                                           c_size_t, POINTER(CkptLocal), c_size_t,
                                           POINTER(Config), P, POINTER(CkptRecord),
                                           POINTER(CkptOptions), P]),
    "ptc_ckpt_async_done": (c_bool, [P]),
    "ptc_ckpt_async_wait": (c_int, [P, u64p]),
}

# Functions a library may lack; calling one that is absent raises UnsupportedError.
# The training-state checkpoint API (ckpt.h, over transport.h) is newer than
# the rest: a library built before it still loads, and ptc.save / ptc.load
# then raise UnsupportedError.
CKPT_FUNCTIONS = tuple(n for n in FUNCTIONS if n.startswith(("ptc_ckpt_", "ptc_transport_")))
HOSTS_FUNCTIONS = tuple(n for n in FUNCTIONS if n.startswith("ptc_reshard_hosts_"))
# The fault-injection setters exist only in the test build's library
# (build/test-hooks/libptc.so), which the package's tests load.
_OPTIONAL = set(CKPT_FUNCTIONS) | set(HOSTS_FUNCTIONS) | {"ptc_fault_alloc_at", "ptc_fault_write_at"}

# ---- sched.h: pipeline schedules (ptc.pipelining) --------------------------------------
# Its structs and functions in one block; optional like ckpt.h (an older
# library loads, ptc.pipelining then raises UnsupportedError).


class SchedGen(Structure):
    _fields_ = [("kind", c_int), ("ranks", c_int), ("microbatches", c_int), ("chunks", c_int),
                ("k", c_int), ("cost_f", c_double), ("cost_b", c_double), ("cost_w", c_double)]


class SchedCosts(Structure):
    _fields_ = [("f", c_double), ("b", c_double), ("w", c_double), ("latency", c_double),
                ("bandwidth", c_double), ("act_bytes", c_double), ("trace", c_void_p)]


class SchedAdaptive(Structure):
    _fields_ = [("ranks", c_int), ("microbatches", c_int), ("mem_limit", c_double),
                ("chosen_k", c_int), ("makespan", c_double), ("candidates", c_int)]


class SchedReport(Structure):
    _fields_ = [("code", c_int), ("rank", c_int), ("step", c_int), ("message", c_char * 320),
                ("grid", c_char_p), ("messages", c_size_t)]


STRUCTS.update({"SchedGen": "ptc_sched_gen", "SchedCosts": "ptc_sched_costs",
                "SchedAdaptive": "ptc_sched_adaptive", "SchedReport": "ptc_sched_report"})
SCHED_FUNCTIONS = {
    "ptc_sched_kind_parse": (c_int, [c_char_p, POINTER(c_int)]),
    "ptc_sched_generate_costed": (c_int, [PP, POINTER(SchedGen), POINTER(SchedCosts)]),
    "ptc_sched_adapt_kfkb": (c_int, [PP, POINTER(SchedAdaptive), POINTER(SchedCosts)]),
    "ptc_sched_parse": (c_int, [PP, c_char_p, c_size_t]),
    "ptc_sched_from_torch": (c_int, [PP, c_char_p, c_size_t, c_int, POINTER(c_size_t)]),
    "ptc_sched_format": (c_int, [P, POINTER(c_void_p), POINTER(c_size_t)]),
    "ptc_sched_to_torch": (c_int, [P, c_int, POINTER(c_void_p), POINTER(c_size_t)]),
    "ptc_sched_text_free": (None, [c_void_p]),
    "ptc_sched_destroy": (None, [P]),
    "ptc_sched_validate": (c_int, [P, POINTER(SchedReport)]),
    "ptc_sched_report_clear": (None, [POINTER(SchedReport)]),
    "ptc_sched_ranks": (c_int, [P]),
    "ptc_sched_stages": (c_int, [P]),
    "ptc_sched_pipes": (c_int, [P]),
    "ptc_sched_microbatches": (c_int, [P]),
    "ptc_sched_chunks": (c_int, [P, c_int]),
    "ptc_sched_kind": (c_char_p, [P]),
    "ptc_sched_k": (c_int, [P]),
    "ptc_sched_stage_of": (c_int, [P, c_int, c_int, POINTER(c_int), POINTER(c_int)]),
    "ptc_sched_simulate": (c_int, [P, POINTER(SchedCosts), PP]),
    "ptc_sched_sim_destroy": (None, [P]),
    "ptc_sched_sim_makespan": (c_double, [P]),
    "ptc_sched_sim_bubble": (c_double, [P]),
    "ptc_sched_sim_peak": (c_double, [P, c_int]),
}
FUNCTIONS.update(SCHED_FUNCTIONS)
_OPTIONAL.update(SCHED_FUNCTIONS)
SCHED_TORCH_COMPUTE = 0
SCHED_TORCH_COMMS = 1

_lock = threading.Lock()
_lib = None
_path = None


def _candidates():
    env = os.environ.get("PTC_LIB")
    if env:
        yield os.path.join(env, "libptc.so") if os.path.isdir(env) else env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libptc.so")
    build = os.environ.get("PTC_BUILD")
    if build:
        yield os.path.join(build, "libptc.so")
    # a source checkout: python/ptc/_lib.py -> <repo>/build/libptc.so
    yield os.path.join(os.path.dirname(os.path.dirname(here)), "build", "libptc.so")


class _Missing:
    """Stands in for an optional function the loaded library lacks."""

    def __init__(self, name):
        self.name = name

    def __call__(self, *args):
        raise _errors.UnsupportedError(
            "%s is not in the loaded libptc (%s)" % (self.name, _path))


class Lib:
    """The loaded library: one attribute per function of FUNCTIONS."""

    def __init__(self, cdll, path):
        self.cdll = cdll
        self.path = path
        for name, (res, args) in FUNCTIONS.items():
            try:
                f = getattr(cdll, name)
            except AttributeError:
                if name in _OPTIONAL:
                    setattr(self, name, _Missing(name))
                    continue
                raise ImportError("libptc at %s lacks %s" % (path, name)) from None
            f.restype = res
            f.argtypes = args
            setattr(self, name, f)

    def has(self, name):
        return not isinstance(getattr(self, name, None), _Missing) and hasattr(self, name)


def lib():
    """The library, loaded on first use."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in _candidates():
            if not os.path.exists(path):
                tried.append(path)
                continue
            cdll = ctypes.CDLL(path)
            _path = path
            _lib = Lib(cdll, path)
            _install_log(_lib)
            return _lib
        raise ImportError("libptc.so not found (tried %s); set PTC_LIB to its path"
                          % ", ".join(tried))


def library_path() -> str:
    """Path of the loaded libptc."""
    lib()
    return _path


# ---- libptc's warnings ----------------------------------------------------------------

# libptc says what a caller should know through its log (ptc_log_set): the
# package installs one handler when it loads the library and keeps the lines
# logged on a thread inside LogCapture (libptc's own threads, and any thread
# outside one, are not heard: as before, nothing is printed); the caller
# raises them as PtcWarning once its call returned (LogCapture.warn).
LOG_FN = ctypes.CFUNCTYPE(None, c_int, c_char_p, c_void_p)
LOG_WARN = 1                                    # PTC_LOG_WARN
_log_tls = threading.local()


def _on_log(level, msg, user):
    lines = getattr(_log_tls, "lines", None)
    if lines is not None and level == LOG_WARN:
        lines.append(msg.decode("utf-8", "replace") if msg else "")


_log_fn = LOG_FN(_on_log)   # referenced for the library's lifetime


def _install_log(L):
    """Route libptc's warnings to _on_log; removed at exit, so that no line
    logged by a thread of the library calls into a finished interpreter."""
    import atexit
    L.ptc_log_set(ctypes.cast(_log_fn, c_void_p), None, LOG_WARN)
    atexit.register(L.ptc_log_set, None, None, 0)


class LogCapture:
    """The warnings libptc logs on this thread while the block runs:

        with LogCapture() as log:
            rc = lib().ptc_...(...)
        log.warn()          # each line as a ptc.PtcWarning, at the caller's call

    Nests (an inner capture keeps its own lines)."""

    def __enter__(self) -> "LogCapture":
        self.lines: list = []
        self._outer = getattr(_log_tls, "lines", None)
        _log_tls.lines = self.lines
        return self

    def __exit__(self, *exc) -> None:
        _log_tls.lines = self._outer

    def warn(self, stacklevel: int = 3) -> None:
        """Each captured line once as a PtcWarning; @p stacklevel 3 names the
        line that called the package function that called warn()."""
        import warnings
        for line in self.lines:
            warnings.warn(_errors.PtcWarning(line), stacklevel=stacklevel)
        self.lines.clear()


# ---- errors -------------------------------------------------------------------------

def last_error(code):
    """The exception for a failed call that returned @p code (reads this thread's
    ptc_last_error(); ptc_strerror() when it is empty)."""
    L = lib()
    msg = L.ptc_last_error()
    msg = msg.decode("utf-8", "replace") if msg else ""
    if not msg:
        s = L.ptc_strerror(code)
        msg = s.decode("utf-8", "replace") if s else "error %d" % code
    return _errors.make_error(code, msg)


def check(code):
    """Raise the matching ptc.Error when a libptc call returned a negative code."""
    if code < 0:
        raise last_error(code)
    return code


def call(name, *args):
    """Call libptc function @p name; raise ptc.Error on a negative result."""
    L = lib()
    L.ptc_error_clear()
    return check(getattr(L, name)(*args))


# ---- small value helpers --------------------------------------------------------------

def enc(s):
    """str / PathLike / bytes -> bytes (UTF-8; paths through os.fsencode)."""
    if s is None:
        return None
    if isinstance(s, bytes):
        return s
    if isinstance(s, str):
        return s.encode("utf-8")
    return os.fsencode(s)


def dec(b):
    return b.decode("utf-8", "replace") if b is not None else None


def parse_config(text):
    """A Config struct from a configuration text (key or path form) or a Config."""
    if isinstance(text, Config):
        return text
    if isinstance(text, dict):
        text = ",".join("%s=%s" % (k, v) for k, v in text.items())
    cfg = Config()
    call("ptc_config_parse", ctypes.byref(cfg), enc(str(text)))
    return cfg


def format_config(cfg, style=CONFIG_STYLE_KEYS):
    buf = ctypes.create_string_buffer(CONFIG_MAX_STAGES * 11 + 64)
    call("ptc_config_format", ctypes.byref(cfg), style, buf, len(buf))
    return buf.value.decode()


def config_world(cfg):
    return lib().ptc_config_world(ctypes.byref(cfg))


def parse_compress(compress):
    """(codec, level) from None, "zstd", "zstd:L" or ("zstd", L)."""
    if compress is None or compress is False or compress == "none":
        return CODEC_NONE, 0
    if isinstance(compress, (tuple, list)):
        name, level = compress
    else:
        name, _, level = str(compress).partition(":")
        level = int(level) if level else 0
    if name != "zstd":
        raise _errors.InvalidError("compress: unknown codec '%s' (only zstd[:LEVEL])" % name)
    if level and not 1 <= int(level) <= 22:
        raise _errors.InvalidError("compress: zstd level must be 1..22, not %s" % level)
    return CODEC_ZSTD, int(level or 0)


class Handle:
    """An owned opaque pointer freed by a destroy function (once)."""

    __slots__ = ("ptr", "_destroy", "_pid")

    def __init__(self, destroy):
        self.ptr = c_void_p()
        self._destroy = destroy
        self._pid = os.getpid()

    def __bool__(self):
        return bool(self.ptr)

    @property
    def value(self):
        return self.ptr

    def close(self):
        p, self.ptr = self.ptr, c_void_p()
        # a handle inherited through fork() belongs to the parent: leave it
        if p and self._pid == os.getpid():
            getattr(lib(), self._destroy)(p)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def hf_params(config_json: Union[str, "os.PathLike[str]"]) -> Dict[str, int]:
    """The rules parameters of a Hugging Face config.json (ptc_rules_params_read):
    a dict name -> int (booleans as 0/1, num_key_value_heads and head_dim derived
    when the file leaves them out)."""
    arr = POINTER(RulesParam)()
    n = c_size_t()
    call("ptc_rules_params_read", enc(config_json), ctypes.byref(arr), ctypes.byref(n))
    try:
        return {dec(arr[i].name): arr[i].value for i in range(n.value)}
    finally:
        lib().ptc_rules_params_free(arr, n)


def presets() -> "tuple[str, ...]":
    """The names of the built-in rules presets (ptc_rules_preset_names)."""
    names, arr, i = [], lib().ptc_rules_preset_names(), 0
    while arr[i]:
        names.append(dec(arr[i]))
        i += 1
    return tuple(names)


class Rules:
    """Parsed placement rules: a preset name (llama, gpt2, megatron-gpt, ptc-mlp, bert, phi3,
    none) or rules text — one rule without a newline (``"match * tp=replicate pp=all"``) or
    several lines — or, with @p file, the rules file at that path (a str is never taken
    for a path). @p params (a dict name -> int, e.g. hf_params("config.json")) gives the
    values of `$NAME` in the rules (docs/rules.md, "Parameters")."""

    def __init__(self, spec: Any = None, params: Optional[Mapping[str, int]] = None,
                 file: Any = None) -> None:
        self._h = Handle("ptc_rules_destroy")
        if isinstance(spec, Rules):
            spec = spec.text
        if (spec is None) == (file is None):
            raise _errors.InvalidError("rules: give rules (a preset name or rules text) or "
                                       "rules_file (a path), one of them")
        params = dict(params or {})
        names = [enc(k) for k in params]
        arr = (RulesParam * max(1, len(params)))()
        for i, (k, v) in enumerate(params.items()):
            arr[i].name = names[i]
            arr[i].value = int(v)
        if file is not None:
            path = os.fspath(file)
            if os.sep not in path:
                path = os.path.join(os.curdir, path)  # never a preset's name
            call("ptc_rules_load_params", ctypes.byref(self._h.ptr), enc(path), arr,
                 len(params))
            return
        if not isinstance(spec, str):
            raise _errors.InvalidError("rules must be a preset name or rules text (str), not "
                                       "%s; a rules file is given as rules_file=PATH"
                                       % type(spec).__name__)
        if "\n" not in spec and spec.strip() in presets():
            call("ptc_rules_load_params", ctypes.byref(self._h.ptr), enc(spec.strip()), arr,
                 len(params))
            return
        b = spec.encode("utf-8")
        try:
            call("ptc_rules_parse_params", ctypes.byref(self._h.ptr), b, len(b), b"rules", arr,
                 len(params))
        except _errors.Error as e:
            if "\n" in spec:
                raise
            hint = (" (a file of that name exists: pass it as rules_file=)"
                    if os.path.isfile(spec) else "")
            raise _errors.make_error(e.code, "rules '%s' is neither a preset name (%s) nor "
                                             "rule text (%s); a rules file is given as "
                                             "rules_file=PATH%s"
                                     % (spec[:80], ", ".join(presets()), e.message,
                                        hint)) from None

    @property
    def ptr(self) -> Any:
        return self._h.ptr

    @property
    def text(self) -> str:
        """The canonical rules text (presets expanded)."""
        return dec(lib().ptc_rules_text(self._h.ptr))

    def close(self) -> None:
        self._h.close()


def as_rules(spec: Any, file: Any = None) -> "Rules":
    """@p spec as Rules (a Rules object as it is), or the rules file @p file."""
    if isinstance(spec, Rules) and file is None:
        return spec
    return Rules(spec, file=file)


def describe_layout(ptr: Any) -> str:
    """The text naming a layout: its configuration, or "explicit:W"."""
    buf = ctypes.create_string_buffer(CONFIG_MAX_STAGES * 11 + 64)
    call("ptc_layout_describe", ptr, buf, len(buf))
    return dec(buf.value)


class Progress:
    """A C progress callback calling fn(what, done, total) (a NULL one for
    fn None), used as a context manager around the libptc call.

    libptc's progress callbacks cannot stop the work (ptc_progress_fn returns
    nothing), so an exception that fn raises is kept, fn is not called again,
    and the exception is raised when the call returns (from ``__exit__``,
    chained to the call's own error if it failed too)."""

    def __init__(self, fn):
        self.fn = fn
        self.exc = None
        self.c = PROGRESS_FN(self._cb) if fn is not None else PROGRESS_FN()

    def _cb(self, what, done, total, user):
        if self.exc is not None:
            return
        try:
            self.fn(dec(what), done, total)
        except BaseException as e:  # noqa: B036 -- raised again by __exit__
            self.exc = e

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        e, self.exc = self.exc, None
        if e is not None:
            raise e
        return False
