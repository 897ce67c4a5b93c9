"""Register estimates never make a launch impossible: the allocator spills to fit one block."""
from gxusim import load_spec
from gxusim.emulator import occupancy


def test_register_heavy_block_still_has_one_resident_program():
    spec = load_spec("gxu")
    # 16 warps, 8192 elements per block, 40 live 32-bit values per element: far over 255
    regs = occupancy.estimate_registers([(8192, 40)], 16, spec)
    assert regs == spec.regs_per_sm // (16 * spec.warp_size)
    occ = occupancy.occupancy(spec, 16, 32, regs, 0, (8192,))
    assert occ.blocks_per_sm == 1 and occ.limiter == "registers"
