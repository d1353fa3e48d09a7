import csv
import io

import pytest

from workbench.errors import WorkbenchError
from workbench.hardware import get_gpu
from workbench.perf.efficiency import default_constants
from workbench.rows import RowError, predict_rows

H200 = get_gpu("h200")
C = default_constants(H200)

GOOD = """op,m,n,k,batch,seq,heads_q,heads_kv,head_dim,causal,pass,rows,cols,dtype,note
gemm,4096,4096,4096,,,,,,,,,,bf16,keep me
gemm,8192,8192,8192,,,,,,,,,,fp8,
attention,,,,2,4096,32,8,128,true,fwd_bwd,,,bf16,
softmax,,,,,,,,,,,8192,128256,fp32,
sum,,,,,,,,,,,4096,4096,bf16,
"""


def _parse(text):
    return list(csv.DictReader(io.StringIO(text)))


def test_predicted_column_added_and_other_columns_pass_through():
    rows = _parse(predict_rows(GOOD, H200, C))
    assert len(rows) == 5
    assert rows[0]["note"] == "keep me" and rows[0]["m"] == "4096"
    times = [float(r["predicted_ms"]) for r in rows]
    assert all(t > 0 for t in times)
    assert times[1] < 2 * times[0] * 8  # fp8 8192^3 is 8x the flops of bf16 4096^3 at twice the rate


def test_existing_predicted_column_is_replaced():
    once = predict_rows(GOOD, H200, C)
    assert predict_rows(once, H200, C) == once


@pytest.mark.parametrize("row,column,expected", [
    ("gemm,0,4,4,,,,,,,,,,bf16", "m", "positive integer"),
    ("gemm,4,4,x,,,,,,,,,,bf16", "k", "positive integer"),
    ("gemm,4,4,4,,,,,,,,,,bf17", "dtype", "bf16, fp16"),
    ("conv,4,4,4,,,,,,,,,,bf16", "op", "gemm, attention"),
    ("attention,,,,2,128,6,4,64,true,fwd,,,bf16", "heads_kv", "divisor"),
    ("attention,,,,2,128,8,4,64,maybe,fwd,,,bf16", "causal", "true, false"),
    ("attention,,,,2,128,8,4,64,true,bwd,,,bf16", "pass", "fwd, fwd_bwd"),
    ("copy,,,,,,,,,,,10,,bf16", "cols", "positive integer"),
])
def test_bad_values_name_row_and_column(row, column, expected):
    header = GOOD.splitlines()[0].rsplit(",", 1)[0]
    text = f"{header}\ngemm,8,8,8,,,,,,,,,,bf16\n{row}\n"
    with pytest.raises(RowError) as err:
        predict_rows(text, H200, C)
    assert err.value.row == 2 and err.value.column == column
    assert expected in str(err.value) and "row 2" in str(err.value)


def test_dtype_the_gpu_lacks_is_an_error_naming_the_row():
    text = "op,m,n,k,dtype\ngemm,64,64,64,fp8\n"
    with pytest.raises(RowError, match="row 1, column 'dtype'.*a100"):
        predict_rows(text, get_gpu("a100"), default_constants(get_gpu("a100")))


def test_csv_without_op_column():
    with pytest.raises(WorkbenchError, match="'op' column"):
        predict_rows("m,n,k\n1,2,3\n", H200, C)
