"""NCCL_DEBUG=INFO lines: what NCCL says it used."""
from bisect_lab.nccl_log import nccl_info, nccl_warnings

REAL = """\
gpu1:1234:1234 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>
gpu1:1234:1234 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
gpu1:1234:1290 [0] NCCL INFO NCCL_PROTO set by environment to LL
gpu1:1235:1291 [1] NCCL INFO NCCL_PROTO set by environment to LL
gpu1:1234:1290 [0] NCCL INFO NCCL_ALGO set by environment to Ring
gpu1:1234:1290 [0] NCCL INFO NCCL_NVLS_ENABLE set by environment to 0.
gpu1:1234:1290 [0] NCCL INFO comm 0x5581 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x9f - Init COMPLETE
gpu1:1235:1291 [1] NCCL INFO ncclCommInitRankConfig comm 0x5582 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 2a000 commId 0x9f - Init COMPLETE
Output token throughput (tok/s): 82.7
"""


def test_real_nccl_info_lines():
    info = nccl_info(REAL)
    assert info["version"] == "2.21.5+cuda12.4"
    # NCCL 2.28 ends the NVLS line with a period (seen on two H200s, docs/gpu.md section 5)
    assert info["env"] == {"NCCL_PROTO": ["LL"], "NCCL_ALGO": ["Ring"], "NCCL_NVLS_ENABLE": ["0"]}
    assert info["ranks"] == [0, 1] and info["nranks"] == 2 and info["lines"] == 8
    assert nccl_warnings(info, {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_NVLS_ENABLE": "0"}) == []
    w = nccl_warnings(info, {"NCCL_PROTO": "Simple", "NCCL_P2P_LEVEL": "SYS", "OTHER": "1"})
    assert w == ["NCCL never mentioned NCCL_P2P_LEVEL (expected SYS): it reads some variables only when it "
                 "needs them, and a misspelt one never",
                 "NCCL reported NCCL_PROTO=LL, the arm set Simple"]


def test_demo_lines_and_no_lines():
    info = nccl_info("[tp0] NCCL INFO all-reduce tree/LL env: {'NCCL_ALGO': 'Tree'}\n[tp1] NCCL INFO all-reduce tree/LL env: {}\n")
    assert info["allreduce"] == {"0": "tree/LL", "1": "tree/LL"}
    # no NCCL version or init: a program's own lines, not NCCL's; no "did not report" warning
    assert nccl_warnings(info, {"NCCL_ALGO": "Tree"}) == []
    assert nccl_warnings(info, {"NCCL_PROTO": "Simple"}) == []
    assert nccl_info("no nccl here\n") == {} and nccl_warnings({}, {"NCCL_ALGO": "Ring"}) == []
