"""The machine code reader: loops, their loads and the memory waits a thread cannot overlap."""
import pytest

from gxusim.model.machine_code import ChunkCode, ChunkLoop, LoopCode, MachineCode, chunk_code, loop_code

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
    # seven instructions a pass, the branch included; the tile body (IMAD, STG, BRA) aside
    # the first load waited for once, the third once, the second never (ready by its use)
    assert code == MachineCode((LoopCode(3, 2.0, instructions=7, load_waits=(1.0, 0.0, 1.0)),),
                               LoopCode(0, 0.0, stores=1, instructions=3))
    # three 16-byte loads a pass, 1.5 a chunk: the loop runs two chunks a pass
    assert chunk_code(code, [ChunkLoop(1.5, 8, stores=False)]) == (ChunkCode(1.0, 0.0, 3.5),)
    # a phase whose chunk issues more loads than the loop does is not this loop
    assert chunk_code(code, [ChunkLoop(6.0, 8, stores=False)]) == (None,)
    # nor is one that stores, where the loop does not
    assert chunk_code(code, [ChunkLoop(1.5, 8, stores=True)]) == (None,)


def test_an_unrolled_chunk_loop_shares_the_tile_loops_waits():
    code = loop_code(UNROLLED)
    assert code == MachineCode((), LoopCode(4, 1.0, stores=1, instructions=9,
                                            load_waits=(0.0, 1.0, 0.0, 0.0)))
    # four chunks of one load each, all in flight together: a quarter of a wait a chunk
    assert chunk_code(code, [ChunkLoop(1.0, 4, stores=False)]) == (ChunkCode(0.25, 0.0, 2.25),)


# A persistent layernorm's tile as ptxas 3.6 left it (H200, transformer_block's seed plan,
# cut down): the row's load waited for by the first shuffle, the weight's load issued amid
# the reduction and waited for after its barrier.
LAYERNORM = """
.L_x_0:
        /*0010*/                   LDG.E.EF R16, desc[UR10][R16.64] ;
        /*0020*/                   SHFL.BFLY PT, R19, R16, 0x10, 0x1f ;
        /*0030*/                   FADD R19, R16, R19 ;
        /*0040*/                   LDG.E.EL R18, desc[UR4][R6.64] ;
        /*0050*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0060*/                   STS [R10+UR6], R19 ;
        /*0070*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0080*/                   LDS R20, [UR7] ;
        /*0090*/                   FFMA R17, R18, R20, R16 ;
        /*00a0*/                   STG.E desc[UR12][R20.64], R17 ;
        /*00b0*/              @!P4 BRA `(.L_x_0) ;
        /*00c0*/                   EXIT ;
"""


def test_a_wait_for_a_load_in_flight_across_a_block_barrier_is_told_apart():
    body = loop_code(LAYERNORM).tile_body
    assert (body.loads, body.round_trips, body.load_waits) == (2, 2.0, (1.0, 1.0))
    assert body.waits_across_barrier == 1.0  # the weight's: it was in flight while reducing
    assert loop_code(UNROLLED).tile_body.waits_across_barrier == 0.0  # no barrier


def test_spills_are_the_local_memory_words_a_pass_moves():
    spilling = ROLLED.replace(
        "        /*0070*/                   FADD R2, R12, R2 ;\n",
        "        /*0070*/                   FADD R2, R12, R2 ;\n"
        "        /*0072*/                   STL [R1+0x10], R2 ;\n"
        "        /*0074*/                   LDL.64 R30, [R1+0x20] ;\n")
    (loop,) = loop_code(spilling).chunk_loops
    assert (loop.local_words, loop.round_trips) == (3, 2.0)  # spill reloads hit the L1
    assert chunk_code(loop_code(spilling), [ChunkLoop(1.5, 8, False)]) == (ChunkCode(1.0, 1.5, 4.5),)


def test_a_load_waits_for_its_address():
    """A gather: the second load's address is the first one's value, two waits a pass."""
    gather = """
.L_x_0:
        /*0010*/                   LDG.E.64 R4, desc[UR4][R20.64] ;
        /*0020*/                   LDG.E R6, desc[UR4][R4.64] ;
        /*0030*/                   FADD R2, R6, R2 ;
        /*0040*/              @!P0 BRA `(.L_x_0) ;
"""
    assert loop_code(gather).tile_body == LoopCode(2, 2.0, instructions=4, load_waits=(1.0, 1.0))


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
    assert loop_code(pipelined).tile_body == LoopCode(2, 0.0, instructions=7, load_waits=(0.0, 0.0))


# A layernorm's tile: its statistics pass unrolled into the tile body (two loads, no
# store), its normalising pass kept as a loop (a load and a store a pass).
ONE_OF_TWO_KEPT = """
.L_x_1:
        /*0010*/                   LDG.E.128 R4, desc[UR4][R20.64] ;
        /*0020*/                   LDG.E.128 R8, desc[UR4][R20.64+0x200] ;
        /*0030*/                   FADD R2, R4, R8 ;
.L_x_0:
        /*0040*/                   LDG.E.128 R12, desc[UR4][R22.64] ;
        /*0050*/                   FMUL R12, R12, R2 ;
        /*0060*/                   STG.E.128 desc[UR4][R24.64], R12 ;
        /*0070*/              @!P0 BRA `(.L_x_0) ;
        /*0080*/              @!P1 BRA `(.L_x_1) ;
"""


def test_stores_tell_apart_chunk_loops_that_load_alike():
    code = loop_code(ONE_OF_TWO_KEPT)
    assert code.chunk_loops == (LoopCode(1, 1.0, stores=1, instructions=4, load_waits=(1.0,)),)
    statistics, normalising = ChunkLoop(1.0, 2, stores=False), ChunkLoop(1.0, 2, stores=True)
    # the kept loop is the pass that stores; the other one's two chunks share the tile body
    assert chunk_code(code, [statistics, normalising]) == (
        ChunkCode(0.5, 0.0, 2.0), ChunkCode(1.0, 0.0, 4.0))
    # two passes alike, one kept: which one, loads and stores cannot tell ...
    assert chunk_code(code, [normalising, normalising]) == (None, None)
    # ... the instructions estimated for each can: the kept loop issues 4 a pass
    light, heavy = normalising._replace(instructions=5.0), normalising._replace(instructions=40.0)
    assert chunk_code(code, [heavy, light])[1] == ChunkCode(1.0, 0.0, 4.0)
    assert chunk_code(code, [light, heavy])[0] == ChunkCode(1.0, 0.0, 4.0)


# Both of a layernorm's passes unrolled into the tile body: the statistics pass issues its
# two chunks' loads together and waits once; the normalising pass waits for each load.
BOTH_UNROLLED = """
.L_x_1:
        /*0010*/                   LDG.E.128 R4, desc[UR4][R20.64] ;
        /*0020*/                   LDG.E.128 R8, desc[UR4][R20.64+0x200] ;
        /*0030*/                   FADD R2, R4, R8 ;
        /*0040*/                   LDG.E.128 R12, desc[UR4][R22.64] ;
        /*0050*/                   FMUL R12, R12, R2 ;
        /*0060*/                   STG.E.128 desc[UR4][R24.64], R12 ;
        /*0070*/                   LDG.E.128 R12, desc[UR4][R22.64+0x200] ;
        /*0080*/                   FMUL R12, R12, R2 ;
        /*0090*/                   STG.E.128 desc[UR4][R24.64+0x200], R12 ;
        /*00a0*/              @!P1 BRA `(.L_x_1) ;
"""


def test_unrolled_chunk_loops_take_the_waits_of_their_own_loads():
    code = loop_code(BOTH_UNROLLED)
    assert code.tile_body.load_waits == (0.0, 1.0, 1.0, 1.0)
    statistics, normalising = ChunkLoop(1.0, 2, stores=False), ChunkLoop(1.0, 2, stores=True)
    waits = [chunk.round_trips for chunk in chunk_code(code, [statistics, normalising])]
    assert waits == [0.5, 1.0]  # not 0.75 each, as sharing the body's waits by loads would
    # where the body's loads are not the unrolled loops' one for one, they share them
    assert [c.round_trips for c in chunk_code(code, [ChunkLoop(1.0, 3, False), normalising])] \
        == pytest.approx([0.6, 0.6])


# A pointwise tile calling sinf (cut down from exp(-|x|) * sin(x)): for |x| >= 105615 a
# branch leads to the Payne-Hanek reduction, a loop reading a table; the fast path skips it.
SINF = """
.L_x_3:
        /*0000*/                   LDG.E R7, desc[UR4][R20.64] ;
        /*0010*/                   FADD.FTZ R24, |R7|, -RZ ;
        /*0020*/                   FSETP.GE.AND P0, PT, R24, 105615, PT ;
        /*0030*/              @!P0 BRA `(.L_x_1) ;
        /*0040*/                   ULDC.64 UR6, c[0x4][0x8] ;
.L_x_2:
        /*0050*/                   LDG.E.CONSTANT R2, desc[UR4][R16.64] ;
        /*0060*/                   IMAD.WIDE.U32 R14, R2, R0, R14 ;
        /*0070*/               @P0 BRA `(.L_x_2) ;
        /*0080*/                   FSEL R22, -R14, R14, !P1 ;
.L_x_1:
        /*0090*/                   FMUL R16, R22, R7 ;
        /*00a0*/                   STG.E desc[UR4][R18.64], R16 ;
        /*00b0*/              @!P1 BRA `(.L_x_3) ;
        /*00c0*/                   EXIT ;
"""


def test_a_math_calls_slow_path_is_not_what_a_tile_issues():
    code = loop_code(SINF)
    # the table loop is no chunk loop, and the tile issues its fast path alone: the load,
    # the test, the branch around the slow path, the multiply, the store and the back edge
    assert code == MachineCode((), LoopCode(1, 1.0, stores=1, instructions=7,
                                            load_waits=(1.0,)))


# A chunk loop whose trip count is a kernel argument (a dynamic shape's reduction): ptxas
# guards it with a branch around it for when it runs no chunk, as a slow path is guarded.
GUARDED = """
.L_x_2:
        /*0000*/                   IMAD.MOV.U32 R2, RZ, RZ, RZ ;
        /*0010*/              @!P0 BRA `(.L_x_0) ;
        /*0020*/                   ULDC.64 UR6, c[0x0][0x210] ;
.L_x_1:
        /*0030*/                   LDG.E R4, desc[UR4][R20.64] ;
        /*0040*/                   FADD R2, R4, R2 ;
        /*0050*/              @!P1 BRA `(.L_x_1) ;
.L_x_0:
        /*0060*/                   STG.E desc[UR4][R16.64], R2 ;
        /*0070*/              @!P2 BRA `(.L_x_2) ;
        /*0080*/                   EXIT ;
"""


def test_a_guarded_chunk_loop_is_no_slow_path():
    code = loop_code(GUARDED)
    # it reads the kernel's own data (its pointer a parameter, constant bank 0): still a
    # chunk loop, and the tile keeps its store
    assert code.chunk_loops == (LoopCode(1, 1.0, instructions=3, load_waits=(1.0,)),)
    assert code.tile_body.stores == 1
