"""lyra_simpy.machine: the CPU's name and flags as /proc/cpuinfo gives them."""

from __future__ import annotations

from lyra_simpy import machine

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx avx2 fma
processor\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx avx2 fma
"""


def test_cpu_model_and_flags_read_the_first_processor(tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    info.write_text(CPUINFO)
    monkeypatch.setattr(machine, "Path", lambda _path: info)
    assert machine.cpu_model() == "AMD EPYC"
    assert machine.cpu_flags() == {"fpu", "sse2", "avx", "avx2", "fma"}


def test_without_cpuinfo_there_is_no_model_and_no_flags(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "Path", lambda _path: tmp_path / "absent")
    assert machine.cpu_model() is None
    assert machine.cpu_flags() == set()
