"""What a verified position costs on this CPU: one 512x2048 matrix product (the embedded model's MLP
shape), one thread, for 1 to 256 rows, in bf16 and fp32; each time also as a multiple of one row's.

    .venv/bin/python studies/probe/matmul_rows.py
"""

import time

import torch


def main() -> None:
    torch.set_num_threads(1)
    for dtype in (torch.bfloat16, torch.float32):
        weights = torch.randn(2048, 512, dtype=dtype)
        one_row = None
        for rows in (1, 4, 13, 64, 256):
            x = torch.randn(rows, 512, dtype=dtype)
            for _ in range(5):
                x @ weights.T
            n = 200 if rows < 64 else 50
            started = time.perf_counter()
            for _ in range(n):
                x @ weights.T
            micros = (time.perf_counter() - started) / n * 1e6
            one_row = one_row or micros
            print(f"{str(dtype):<15} {rows:>4} rows {micros:>9.0f} us  {micros / one_row:>6.1f}x one row")


if __name__ == "__main__":
    main()
