"""Write `diurnal.csv`: a day of availability for 10,000 clients, as an availability file
(`worker,down_at,up_at` per row, the worker column holding the client id).

Each client lives in one of 24 time zones (uniform) and is down for one block a day: from a
local start between 08:00 and 10:00 (when a phone leaves its charger and its Wi-Fi) for
10 to 14 hours. Blocks that run past midnight wrap to the day's start. Seeded: the file is a
pure function of SEED, so regenerating it gives the same bytes.

    python scenarios/population/make_diurnal.py
"""

from pathlib import Path

import numpy as np

CLIENTS, DAY, SEED = 10_000, 86_400.0, 2026
OUT = Path(__file__).with_name("diurnal.csv")


def blocks(rng: np.random.Generator) -> list[tuple[int, float, float]]:
    zone = rng.integers(0, 24, CLIENTS) * 3_600.0
    start = (zone + rng.uniform(8 * 3_600.0, 10 * 3_600.0, CLIENTS)) % DAY
    length = rng.uniform(10 * 3_600.0, 14 * 3_600.0, CLIENTS)
    rows = []
    for client in range(CLIENTS):
        down, up = float(start[client]), float(start[client] + length[client])
        if up <= DAY:
            rows.append((client, down, up))
        else:  # past midnight: down from the start of the day too
            rows += [(client, 0.0, up - DAY), (client, down, DAY)]
    return sorted(rows)


def main() -> None:
    rows = blocks(np.random.default_rng(SEED))
    lines = ["worker,down_at,up_at"] + [f"{c},{a:.1f},{b:.1f}" for c, a, b in rows]
    OUT.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
