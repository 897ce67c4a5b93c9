"""The machine code reader: loops, their loads and the memory waits a thread cannot overlap."""
from gxusim.machine_code import ChunkCode, LoopCode, MachineCode, chunk_code, loop_code

# nvdisasm's layout, cut down: a tile loop (.L_x_1) around a chunk loop (.L_x_0) whose pass
# issues two loads, waits for the first, issues a third and waits for it.
ROLLED = """
        /*0000*/                   LDC R1, c[0x0][0x28] ;
.L_x_1:
        /*0010*/                   IMAD.MOV.U32 R2, RZ, RZ, RZ ;
.L_x_0:
        /*0020*/                   LDG.E.128 R4, desc[UR4][R20.64] ;
        /*0030*/                   LDG.E.128 R8, desc[UR4][R20.64+0x200] ;
        /*0040*/                   FADD R2, R4, R2 ;
        /*0050*/                   LDG.E.128 R12, desc[UR4][R20.64+0x400] ;
        /*0060*/                   FADD R2, R8, R2 ;
        /*0070*/                   FADD R2, R12, R2 ;
        /*0080*/              @!P0 BRA `(.L_x_0) ;
        /*0090*/                   STG.E desc[UR4][R16.64], R2 ;
        /*00a0*/              @!P1 BRA `(.L_x_1) ;
        /*00b0*/                   EXIT ;
.L_x_2:
        /*00c0*/                   BRA `(.L_x_2);
"""

# The same tile with its chunk loop unrolled away: four loads issued before the first wait.
UNROLLED = """
.L_x_1:
        /*0010*/                   LDG.E.128 R4, desc[UR4][R20.64] ;
        /*0020*/                   LDG.E.128 R8, desc[UR4][R20.64+0x200] ;
        /*0030*/                   LDG.E.128 R12, desc[UR4][R20.64+0x400] ;
        /*0040*/                   LDG.E.128 R24, desc[UR4][R20.64+0x600] ;
        /*0050*/                   FADD R2, R4, R8 ;
        /*0060*/                   FADD R2, R12, R2 ;
        /*0070*/                   FADD R2, R24, R2 ;
        /*0080*/                   STG.E desc[UR4][R16.64], R2 ;
        /*0090*/              @!P1 BRA `(.L_x_1) ;
        /*00a0*/                   EXIT ;
"""


def test_a_rolled_chunk_loop_waits_where_its_loads_are_used():
    code = loop_code(ROLLED)
    assert code == MachineCode((LoopCode(loads=3, round_trips=2.0),), LoopCode(0, 0.0))
    # three 16-byte loads a pass, 1.5 a chunk: the loop runs two chunks a pass
    assert chunk_code(code, [1.5], [8]) == (ChunkCode(round_trips=1.0, local_words=0.0),)
    # a phase whose chunk issues more loads than the loop does is not this loop
    assert chunk_code(code, [6.0], [8]) == (None,)


def test_an_unrolled_chunk_loop_shares_the_tile_loops_waits():
    code = loop_code(UNROLLED)
    assert code == MachineCode((), LoopCode(loads=4, round_trips=1.0))
    # four chunks of one load each, all in flight together: a quarter of a wait a chunk
    assert chunk_code(code, [1.0], [4]) == (ChunkCode(0.25, 0.0),)


def test_spills_are_the_local_memory_words_a_pass_moves():
    spilling = ROLLED.replace(
        "        /*0070*/                   FADD R2, R12, R2 ;\n",
        "        /*0070*/                   FADD R2, R12, R2 ;\n"
        "        /*0072*/                   STL [R1+0x10], R2 ;\n"
        "        /*0074*/                   LDL.64 R30, [R1+0x20] ;\n")
    (loop,) = loop_code(spilling).chunk_loops
    assert (loop.local_words, loop.round_trips) == (3, 2.0)  # spill reloads hit the L1
    assert chunk_code(loop_code(spilling), [1.5], [8]) == (ChunkCode(1.0, 1.5),)


def test_a_load_waits_for_its_address():
    """A gather: the second load's address is the first one's value, two waits a pass."""
    gather = """
.L_x_0:
        /*0010*/                   LDG.E.64 R4, desc[UR4][R20.64] ;
        /*0020*/                   LDG.E R6, desc[UR4][R4.64] ;
        /*0030*/                   FADD R2, R6, R2 ;
        /*0040*/              @!P0 BRA `(.L_x_0) ;
"""
    assert loop_code(gather).tile_body == LoopCode(loads=2, round_trips=2.0)


def test_code_without_loops_has_no_loop_code():
    assert loop_code("        /*0000*/                   EXIT ;\n") is None


def test_a_pipelined_loops_copies_are_its_loads_and_its_copy_barrier_is_not():
    pipelined = """
.L_x_0:
        /*0010*/                   LDGSTS.E.BYPASS.128 [R3], desc[UR4][R20.64] ;
        /*0020*/                   LDGSTS.E.BYPASS.128 [R3+0x200], desc[UR4][R20.64+0x200] ;
        /*0030*/                   LDGDEPBAR ;
        /*0040*/                   DEPBAR.LE SB0, 0x1 ;
        /*0050*/                   LDS.128 R4, [R5] ;
        /*0060*/                   FADD R2, R4, R2 ;
        /*0070*/              @!P0 BRA `(.L_x_0) ;
"""
    # copies into shared memory are not waited for one by one
    assert loop_code(pipelined).tile_body == LoopCode(loads=2, round_trips=0.0)
