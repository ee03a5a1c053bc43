"""ctypes declarations of libdlock's C API (include/dlock.h).

Internal: the public API is in dlock/__init__.py. Every structure here
mirrors one of dlock.h field by field; tests/test_abi.py compiles a small
C program against the header and compares sizes and offsets, so a change
of the header that is not made here too fails there.

Why ctypes: it is in the standard library (nothing to build, nothing from
a package index), every call releases the GIL while the library works
(a waiting acquire does not stop the interpreter's other threads), and
callbacks made with CFUNCTYPE take the GIL themselves when the library's
threads call them. Its cost, about a microsecond per call, is small next
to a round trip to Redis (bench/peers/dlockpy_peer.py measures it).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from ctypes import (POINTER, Structure, byref, c_char, c_char_p, c_int,
                    c_int64, c_size_t, c_uint, c_uint64, c_void_p)

OPTIONS_VERSION = 2
ACQUIRE_OPTIONS_VERSION = 2
OWNER_MAX = 96
HOST_MAX = 256
LABEL_MAX = 512
VALUE_MAX = 1024
RW_PREFER_READERS = 0x1


class Event(Structure):
    """struct dlock_event."""
    _fields_ = [
        ("type", c_int),
        ("name", c_char_p),
        ("status", c_int),
        ("duration_us", c_int64),
        ("token", c_uint64),
    ]


# void (*dlock_event_cb)(const dlock_event *ev, void *userdata)
EVENT_CB = ctypes.CFUNCTYPE(None, POINTER(Event), c_void_p)


class Options(Structure):
    """struct dlock_options."""
    _fields_ = [
        ("version", c_uint),
        ("servers", POINTER(c_char_p)),
        ("nservers", c_size_t),
        ("username", c_char_p),
        ("password", c_char_p),
        ("key_prefix", c_char_p),
        ("connect_timeout_ms", c_int64),
        ("command_timeout_ms", c_int64),
        ("pool_size", c_int),
        ("wait_strategy", c_int),
        ("spin_min_ms", c_int64),
        ("spin_max_ms", c_int64),
        ("drift_ppm", c_int64),
        ("drift_fixed_ms", c_int64),
        ("tls_ca_file", c_char_p),
        ("tls_ca_dir", c_char_p),
        ("tls_server_name", c_char_p),
        ("tls_cert_file", c_char_p),
        ("tls_key_file", c_char_p),
        ("tls_insecure", c_int),
        ("sentinel_username", c_char_p),
        ("sentinel_password", c_char_p),
        ("wait_replicas", c_int),
        ("wait_replicas_timeout_ms", c_int64),
        ("lock_delay_ms", c_int64),
        ("holder_info", c_int),
        ("holder_label", c_char_p),
        ("holder_pid", c_int64),
        ("on_event", EVENT_CB),
        ("on_event_userdata", c_void_p),
        ("fence_retention_ms", c_int64),  # version 2
    ]


# void (*dlock_lost_cb)(dlock_lock *lock, void *userdata)
LOST_CB = ctypes.CFUNCTYPE(None, c_void_p, c_void_p)


class AcquireOptions(Structure):
    """struct dlock_acquire_options."""
    _fields_ = [
        ("version", c_uint),
        ("wait_ms", c_int64),
        ("lease_ms", c_int64),
        ("watchdog", c_int),
        ("on_lost", LOST_CB),
        ("on_lost_userdata", c_void_p),
        ("flags", c_uint),
    ]


class Stats(Structure):
    """struct dlock_stats."""
    _fields_ = [(n, c_uint64) for n in (
        "requests", "acquisitions", "busy", "waits", "wakeups", "renewals",
        "lost", "reconnects")]


HIST_BUCKETS = 25


class Histogram(Structure):
    """struct dlock_histogram."""
    _fields_ = [
        ("count", c_uint64),
        ("sum_us", c_uint64),
        ("bucket", c_uint64 * HIST_BUCKETS),
    ]


class Metrics(Structure):
    """struct dlock_metrics."""
    _fields_ = [
        ("stats", Stats),
        ("acquire_wait", Histogram),
        ("hold", Histogram),
        ("renewal", Histogram),
    ]


class Info(Structure):
    """struct dlock_info."""
    _fields_ = [
        ("held", c_int),
        ("owner", c_char * OWNER_MAX),
        ("reentry", c_int64),
        ("ttl_ms", c_int64),
        ("last_token", c_uint64),
        ("waiters", c_int64),
        ("nodes_holding", c_int),
        ("has_holder", c_int),
        ("holder_host", c_char * HOST_MAX),
        ("holder_pid", c_int64),
        ("holder_label", c_char * LABEL_MAX),
        ("holder_version", c_char * 32),
        ("held_ms", c_int64),
        ("notify_waiters", c_int64),
        ("fair_queue", c_int64),
    ]


class ListEntry(Structure):
    """struct dlock_list_entry."""
    _fields_ = [
        ("kind", c_char_p),
        ("name", c_char_p),
        ("info", Info),
    ]


# int (*dlock_list_cb)(const dlock_list_entry *entry, void *userdata)
LIST_CB = ctypes.CFUNCTYPE(c_int, POINTER(ListEntry), c_void_p)


class Holder(Structure):
    """struct dlock_holder."""
    _fields_ = [
        ("owner", c_char * OWNER_MAX),
        ("ttl_ms", c_int64),
        ("token", c_uint64),
    ]


class SharedInfo(Structure):
    """struct dlock_shared_info."""
    _fields_ = [
        ("kind", c_int),
        ("limit", c_int64),
        ("holders", c_int64),
        ("listed", c_size_t),
        ("waiters", c_int64),
        ("writer_waiting_ms", c_int64),
        ("last_token", c_uint64),
    ]


class LeaderInfo(Structure):
    """struct dlock_leader_info."""
    _fields_ = [
        ("leading", c_int),
        ("proclaimed", c_int),
        ("owner", c_char * OWNER_MAX),
        ("epoch", c_uint64),
        ("value", c_char * (VALUE_MAX + 1)),
        ("since_ms", c_int64),
        ("ttl_ms", c_int64),
    ]


STRUCTS = {
    "dlock_options": Options,
    "dlock_event": Event,
    "dlock_acquire_options": AcquireOptions,
    "dlock_stats": Stats,
    "dlock_histogram": Histogram,
    "dlock_metrics": Metrics,
    "dlock_info": Info,
    "dlock_list_entry": ListEntry,
    "dlock_holder": Holder,
    "dlock_shared_info": SharedInfo,
    "dlock_leader_info": LeaderInfo,
}

_P = c_void_p  # dlock_client *, dlock_lock *, dlock_election *
_PP = POINTER(c_void_p)
_SIGS = {
    "dlock_strerror": (c_char_p, [c_int]),
    "dlock_status_name": (c_char_p, [c_int]),
    "dlock_version": (c_char_p, []),
    "dlock_event_name": (c_char_p, [c_int]),
    "dlock_options_init": (None, [POINTER(Options)]),
    "dlock_client_new": (c_int, [_PP, POINTER(Options), c_char_p, c_size_t]),
    "dlock_client_free": (None, [_P]),
    "dlock_errmsg": (c_char_p, [_P]),
    "dlock_client_id": (c_char_p, [_P]),
    "dlock_client_cancel": (None, [_P]),
    "dlock_client_stats": (None, [_P, POINTER(Stats)]),
    "dlock_client_metrics": (None, [_P, POINTER(Metrics)]),
    "dlock_histogram_bound_us": (c_int64, [c_int]),
    "dlock_acquire_options_init": (None, [POINTER(AcquireOptions)]),
    "dlock_lock_acquire": (c_int, [_PP, _P, c_char_p, c_int64, c_int64]),
    "dlock_lock_acquire_ex": (c_int, [_PP, _P, c_char_p,
                                      POINTER(AcquireOptions)]),
    "dlock_lock_release": (c_int, [_P]),
    "dlock_lock_detach": (None, [_P]),
    "dlock_lock_extend": (c_int, [_P, c_int64]),
    "dlock_lock_token": (c_uint64, [_P]),
    "dlock_lock_validity_ms": (c_int64, [_P]),
    "dlock_lock_status": (c_int, [_P]),
    "dlock_lock_lost_reason": (c_int, [_P, POINTER(c_char_p)]),
    "dlock_lock_name": (c_char_p, [_P]),
    "dlock_lock_owner": (c_char_p, [_P]),
    "dlock_fenced_set": (c_int, [_P, c_char_p, c_uint64, c_char_p,
                                 c_size_t]),
    "dlock_fenced_get": (c_int, [_P, c_char_p, POINTER(c_void_p),
                                 POINTER(c_size_t), POINTER(c_uint64)]),
    "dlock_fenced_read": (c_int, [_P, c_char_p, c_uint64, POINTER(c_void_p),
                                  POINTER(c_size_t), POINTER(c_uint64)]),
    "dlock_lock_inspect": (c_int, [_P, c_char_p, POINTER(Info)]),
    "dlock_client_check": (c_int, [_P, c_char_p, c_size_t]),
    "dlock_client_topology": (c_int, [_P, c_char_p, c_size_t]),
    "dlock_lock_adopt": (c_int, [_PP, _P, c_char_p, c_char_p, c_uint64]),
    "dlock_lock_check": (c_int, [_P, c_char_p, c_uint64]),
    "dlock_list": (c_int, [_P, c_char_p, LIST_CB, c_void_p]),
    "dlock_sem_acquire": (c_int, [_PP, _P, c_char_p, c_int64,
                                  POINTER(AcquireOptions)]),
    "dlock_sem_set_limit": (c_int, [_P, c_char_p, c_int64,
                                    POINTER(c_int64)]),
    "dlock_rw_acquire_shared": (c_int, [_PP, _P, c_char_p, c_uint,
                                        POINTER(AcquireOptions)]),
    "dlock_rw_downgrade": (c_int, [_PP, _P]),
    "dlock_shared_inspect": (c_int, [_P, c_char_p, POINTER(SharedInfo),
                                     POINTER(Holder), c_size_t]),
    "dlock_lock_acquire_all": (c_int, [_PP, _P, POINTER(c_char_p), c_size_t,
                                       POINTER(AcquireOptions)]),
    "dlock_lock_release_all": (c_int, [_PP, c_size_t]),
    "dlock_campaign": (c_int, [_PP, _P, c_char_p, c_char_p,
                               POINTER(AcquireOptions)]),
    "dlock_election_proclaim": (c_int, [_P, c_char_p]),
    "dlock_election_resign": (c_int, [_P]),
    "dlock_election_status": (c_int, [_P]),
    "dlock_election_epoch": (c_uint64, [_P]),
    "dlock_election_lock": (_P, [_P]),
    "dlock_leader": (c_int, [_P, c_char_p, POINTER(LeaderInfo)]),
    "dlock_leader_wait": (c_int, [_P, c_char_p, POINTER(LeaderInfo), c_int64,
                                  POINTER(LeaderInfo)]),
}


# ------------------------------------------------- the event-loop API
# include/dlock_loop.h (dlock.aio). Pointers to dlock_loop, dlock_op and
# dlock_hold are plain c_void_p.
LOOP_ACQUIRE_VERSION = 2

# void (*dlock_op_cb)(dlock_op *op, int status, dlock_hold *hold, void *ud)
OP_CB = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_void_p, c_void_p)
# void (*dlock_hold_lost_cb)(dlock_hold *hold, int status, void *ud)
HOLD_LOST_CB = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_void_p)


class LoopAcquire(Structure):
    """struct dlock_loop_acquire."""
    _fields_ = [
        ("version", c_uint),
        ("wait_ms", c_int64),
        ("lease_ms", c_int64),
        ("renew", c_int),
        ("strategy", c_int),
        ("on_lost", HOLD_LOST_CB),
        ("on_lost_userdata", c_void_p),
        ("lazy_token", c_int),  # version 2
    ]


# Structures of dlock_loop.h (test_abi.py compiles them against it).
LOOP_STRUCTS = {
    "dlock_loop_acquire": LoopAcquire,
}

_LOOP_SIGS = {
    "dlock_loop_new": (c_int, [_PP, _P]),
    "dlock_loop_free": (None, [_P]),
    "dlock_loop_fd": (c_int, [_P]),
    "dlock_loop_timeout_ms": (c_int64, [_P]),
    "dlock_loop_process": (c_int, [_P]),
    "dlock_loop_acquire_init": (None, [POINTER(LoopAcquire), _P]),
    "dlock_loop_lock": (c_int, [_PP, _P, c_char_p, POINTER(LoopAcquire),
                                OP_CB, c_void_p]),
    "dlock_loop_sem_acquire": (c_int, [_PP, _P, c_char_p, c_int64,
                                       POINTER(LoopAcquire), OP_CB,
                                       c_void_p]),
    "dlock_loop_read_acquire": (c_int, [_PP, _P, c_char_p,
                                        POINTER(LoopAcquire), OP_CB,
                                        c_void_p]),
    "dlock_loop_campaign": (c_int, [_PP, _P, c_char_p, c_char_p,
                                    POINTER(LoopAcquire), OP_CB, c_void_p]),
    "dlock_loop_proclaim": (c_int, [_PP, _P, _P, c_char_p, OP_CB,
                                    c_void_p]),
    "dlock_loop_leader": (c_int, [_PP, _P, c_char_p, OP_CB, c_void_p]),
    "dlock_loop_leader_wait": (c_int, [_PP, _P, c_char_p,
                                       POINTER(LeaderInfo), c_int64, OP_CB,
                                       c_void_p]),
    "dlock_op_leader": (c_int, [_P, POINTER(LeaderInfo)]),
    "dlock_loop_lock_all": (c_int, [_PP, _P, POINTER(c_char_p), c_int,
                                    POINTER(LoopAcquire), OP_CB, c_void_p]),
    "dlock_op_holds": (c_int, [_P, _PP]),
    "dlock_loop_release": (c_int, [_PP, _P, _P, OP_CB, c_void_p]),
    "dlock_loop_extend": (c_int, [_PP, _P, _P, c_int64, OP_CB, c_void_p]),
    "dlock_loop_fenced_set": (c_int, [_PP, _P, c_char_p, c_uint64,
                                      c_char_p, c_size_t, OP_CB, c_void_p]),
    "dlock_loop_fenced_get": (c_int, [_PP, _P, c_char_p, OP_CB, c_void_p]),
    "dlock_loop_fenced_read": (c_int, [_PP, _P, c_char_p, c_uint64, OP_CB,
                                       c_void_p]),
    "dlock_op_value": (c_void_p, [_P, POINTER(c_size_t),
                                  POINTER(c_uint64)]),
    "dlock_op_cancel": (None, [_P]),
    "dlock_op_errmsg": (c_char_p, [_P]),
    "dlock_hold_name": (c_char_p, [_P]),
    "dlock_hold_token": (c_uint64, [_P]),
    "dlock_hold_owner": (c_char_p, [_P]),
    "dlock_hold_validity_ms": (c_int64, [_P]),
    "dlock_hold_status": (c_int, [_P]),
    "dlock_hold_lost_reason": (c_int, [_P, POINTER(c_char_p)]),
    "dlock_loop_pending": (c_int, [_P]),
}
_SIGS.update(_LOOP_SIGS)
# Newer than the first binding: skipped when the library lacks them.
_NEWER_SIGS = {
    "dlock_client_set_layout": (c_int, [_P, c_int]),
}
_SIGS.update(_NEWER_SIGS)


def _candidates() -> list[str]:
    """Where libdlock is looked for, in order: $DLOCK_LIBRARY, the
    package's own directory (a library copied in at install), the system
    loader's search (libdlock.so.0, then what find_library names)."""
    out = []
    env = os.environ.get("DLOCK_LIBRARY")
    if env:
        out.append(env)
        return out
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libdlock.so.0", "libdlock.so"):
        p = os.path.join(here, name)
        if os.path.exists(p):
            out.append(p)
    out.append("libdlock.so.0")
    found = ctypes.util.find_library("dlock")
    if found:
        out.append(found)
    return out


def load() -> ctypes.CDLL:
    """Open libdlock and declare every function's types. Raises OSError
    naming every place tried when none loads."""
    errors = []
    for cand in _candidates():
        try:
            lib = ctypes.CDLL(cand)
        except OSError as e:
            errors.append("%s: %s" % (cand, e))
            continue
        for name, (res, args) in _SIGS.items():
            if (name in _LOOP_SIGS or name in _NEWER_SIGS) and \
                    not hasattr(lib, name):
                continue  # an older libdlock: dlock.aio says so
            fn = getattr(lib, name)
            fn.restype = res
            fn.argtypes = args
        lib.path = cand
        return lib
    raise OSError("libdlock not found (set DLOCK_LIBRARY to the path of "
                  "libdlock.so): " + "; ".join(errors))


libc = ctypes.CDLL(None)
libc.free.argtypes = [c_void_p]
libc.free.restype = None

__all__ = ["load", "libc", "byref"]
