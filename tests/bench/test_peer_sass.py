"""lab/peer_sass.py's counting (FA4's side needs the CUTLASS DSL and runs by hand): the
classes of a ``cuobjdump -sass`` listing, predicated and suffixed opcodes included, and a
kernel of known instructions through ptxas and the disassembler."""
from __future__ import annotations

import pytest

from lab.peer_sass import sass_counts
from ptxdsl.toolchain import ToolchainError, assemble, disassemble

LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;               /* 0x00000a0000017a02 */
                                                                         /* 0x000fe40000000f00 */
        /*0010*/              @!P0 BRA 0x60 ;                            /* 0x0000000000008947 */
        /*0020*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT, gsb0 ;
        /*1030*/               @P1 MUFU.EX2 R3, R2 ;                     /* 0x0000000200037308 */
        /*1040*/                   MUFU.RCP R4, R2 ;
        /*1050*/                   STSM.16.M88.4 [R5], R8 ;
        /*1060*/                   STS.64 [R5], R8 ;
"""


def test_counts_classes_with_predicates_and_suffixes():
    c = sass_counts(LISTING, "Function k:\n  REG:168 STACK:0 SHARED:1024")
    assert c["registers"] == 168 and c["instructions"] == 7
    assert (c["HGMMA"], c["MUFU.EX2"], c["BRA"], c["STSM"], c["STS"]) == (1, 1, 1, 1, 1)
    assert c["LDS"] == 0 and sass_counts(LISTING)["registers"] == 0


PTX = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 p) {
  .reg .f32 %f<4>; .reg .u64 %a;
  ld.param.u64 %a, [p]; cvta.to.global.u64 %a, %a;
  ld.global.f32 %f0, [%a];
  ex2.approx.f32 %f1, %f0; ex2.approx.f32 %f2, %f1; ex2.approx.f32 %f3, %f2;
  st.global.f32 [%a], %f3;
  ret;
}
"""


@pytest.mark.ptxas
def test_a_kernel_of_three_exponentials_counts_three():
    try:
        sass = disassemble(assemble(PTX, "sm_90a").cubin)
    except ToolchainError as e:
        pytest.skip(str(e))
    c = sass_counts(sass)
    assert c["MUFU.EX2"] == 3 and c["HGMMA"] == 0 and c["instructions"] > 3
