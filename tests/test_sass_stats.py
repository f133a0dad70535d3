#!/usr/bin/env python3
"""scripts/sass_stats.py's parser on hand-written cuobjdump -sass text: every
instruction counted once (predicated ones and five-digit offsets included), the
groups summed from their opcodes, kernels kept apart. Run by ctest."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "py"))
from checks import check, finish  # noqa: E402  (also puts scripts/ on the path)
from sass_stats import kernels, row  # noqa: E402


SASS = """
Fatbin elf code:
================
arch = sm_90
	code for sm_90
		Function : _Z3onePf
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                 /* 0x00000a00ff017b82 */
                                                                           /* 0x000fe20000000800 */
        /*0010*/                   BSSY B0, `(.L_x_1) ;                   /* 0x0000012000007945 */
        /*0020*/              @!P0 BRA `(.L_x_2) ;                        /* 0x0000000000008947 */
        /*0030*/                   FFMA R2, R3, R4, R5 ;                  /* 0x0000000403027223 */
        /*0040*/               @P1 CALL.REL.NOINC `(.L_x_3) ;             /* 0x0000000000001944 */
        /*0050*/                   MUFU.RCP R6, R7 ;                      /* 0x0000000700067308 */
        /*0060*/                   FCHK P0, R2, R6 ;                      /* 0x0000000602007302 */
        /*0070*/                   SHFL.BFLY PT, R8, R9, 0x1, 0x1f ;      /* 0x0c201f0009087f89 */
        /*10000*/                  F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C R1, R2, R3, RZ ; /* 0x0 */
        /*10010*/                  STG.E.64 desc[UR4][R2.64], R4 ;        /* 0x0000000402007986 */
        /*10020*/                  BSYNC B0 ;                             /* 0x0000000000007941 */
        /*10030*/                  EXIT ;                                 /* 0x000000000000794d */
		.....................
		Function : _Z3twov
        /*0000*/                   LDS.128 R4, [R2] ;                     /* 0x0 */
        /*0010*/                   STS [R3], R4 ;                         /* 0x0 */
        /*0020*/                   LDG.E.128 R8, desc[UR4][R6.64] ;       /* 0x0 */
        /*0030*/                   RET.REL.NODEC R20 `(_Z3twov) ;         /* 0x0 */
"""

ks = kernels(SASS)
check("kernel names", [n for n, _ in ks], ["_Z3onePf", "_Z3twov"])
one, two = row(ks[0][1]), row(ks[1][1])
# The encoding-only continuation line (no offset) is not an instruction.
check("one: instructions", one["instr"], 12)
check("one: control (BSSY, BRA, CALL, BSYNC)", one["control"], 4)
check("one: FCHK + MUFU", one["div+mufu"], 2)
check("one: shuffles", one["shfl"], 1)
check("one: F2FP at a five-digit offset", one["f2fp"], 1)
check("one: FFMA", one["ffma"], 1)
check("one: global", one["ldg/stg"], 1)
check("two: instructions", two["instr"], 4)
check("two: shared", two["lds/sts"], 2)
check("two: global", two["ldg/stg"], 1)
check("two: RET is control", two["control"], 1)
check("no kernel in text without one", kernels("arch = sm_90\n"), [])

finish("sass_stats parser")
