"""Reproduce the full-suite crash of stop 29: XLA's CPU compiler at the kernel's memory-map limit.

Every program XLA compiles for the CPU maps about three regions of machine code. This script
fills the process's map table to HEADROOM regions below ``vm.max_map_count`` (pages of one
anonymous mapping, every other one made read-only, each a region of its own), then compiles
small programs. When the table is full, LLVM reports "Cannot allocate memory" and the process
dies with a segmentation fault (exit 139), as CI did. tests/conftest.py keeps the suite below
half the limit by dropping JAX's compiled programs.

    python tools/map_limit_crash.py [HEADROOM]     # default 600; expect exit code 139
"""

import ctypes
import mmap
import sys

import jax
import jax.numpy as jnp


def regions() -> int:
    with open("/proc/self/maps") as maps:
        return sum(1 for _ in maps)


def main(headroom: int) -> None:
    with open("/proc/sys/vm/max_map_count") as limit_file:
        limit = int(limit_file.read())
    pages = limit - headroom - regions()
    block = mmap.mmap(-1, pages * mmap.PAGESIZE)
    start = ctypes.addressof(ctypes.c_char.from_buffer(block))
    libc = ctypes.CDLL(None, use_errno=True)
    for page in range(0, pages, 2):
        libc.mprotect(ctypes.c_void_p(start + page * mmap.PAGESIZE), mmap.PAGESIZE, 1)  # PROT_READ
    print(f"{regions()} regions of {limit}", flush=True)
    for i in range(10 * headroom):
        jax.jit(lambda x, i=i: jnp.sort(jnp.sin(x) * i))(jnp.ones(64 + i)).block_until_ready()
        if i % 50 == 0:
            print(f"{i} programs compiled, {regions()} regions", flush=True)
    print("no crash")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 600)
