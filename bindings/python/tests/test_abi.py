"""The ctypes structures match include/dlock.h and dlock_loop.h: a C
program built against the headers prints every field's offset and every
struct's size, and dlock/_ffi.py must agree (a header change not made
there fails here)."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from conftest import ROOT
from dlock import _ffi


def test_structs_match_the_header(tmp_path):
    header = os.path.join(ROOT, "include", "dlock.h")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not os.path.exists(header):
        pytest.skip("no C compiler or no include/dlock.h")
    lines = ['#include <stdio.h>', '#include <stddef.h>',
             '#include "dlock.h"', '#include "dlock_loop.h"',
             'int main(void) {']
    structs = dict(_ffi.STRUCTS, **_ffi.LOOP_STRUCTS)
    for cname, cls in structs.items():
        lines.append('printf("%s %%zu\\n", sizeof(%s));' % (cname, cname))
        for field, _ in cls._fields_:
            lines.append('printf("%s.%s %%zu\\n", offsetof(%s, %s));'
                         % (cname, field, cname, field))
    lines += ['return 0;', '}']
    src = tmp_path / "abi.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "abi"
    subprocess.run([cc, "-I", os.path.dirname(header), "-o", str(exe),
                    str(src)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True,
                         text=True).stdout
    want = dict(ln.split() for ln in out.splitlines())
    got = {}
    for cname, cls in structs.items():
        got[cname] = str(_ffi.ctypes.sizeof(cls))
        for field, _ in cls._fields_:
            got["%s.%s" % (cname, field)] = str(getattr(cls, field).offset)
    assert got == want
