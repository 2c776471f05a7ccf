"""The differential fuzzer in the suite (tests/fuzz.py): lade == plain `generate` on random cases.

Default: as many seeded cases as fit in LADE_FUZZ_SECONDS (30 s; at least 20 cases), seeds 0, 1, 2, ... Long mode:
`pytest tests/core/test_fuzz.py --fuzz-long` (or LADE_FUZZ_CASES=5000) runs a fixed number of cases whatever the
time.
LADE_FUZZ_SEED=S reruns one case; a failure prints that command with the case.
"""

import os
import time
import warnings

from fuzz import case, run


def test_lade_equals_plain_generate_on_random_cases(request):
    budget = float(os.environ.get("LADE_FUZZ_SECONDS", 30))
    count = int(os.environ.get("LADE_FUZZ_CASES", 5000 if request.config.getoption("--fuzz-long") else 0))
    first = int(os.environ.get("LADE_FUZZ_SEED", 0))
    start, seed, kinds = time.perf_counter(), first, set()
    while (seed - first < count) if count else (time.perf_counter() - start < budget or seed - first < 20):
        drawn = case(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            failure = run(drawn)
        assert failure is None, f"{failure}\ncase: {drawn}\nreproduce: LADE_FUZZ_SEED={seed} LADE_FUZZ_CASES=1 " \
                                f"./run_tests.sh tests/core/test_fuzz.py   (or: python tests/fuzz.py {seed})"
        kinds.add(drawn.kind)
        seed += 1
        if os.environ.get("LADE_FUZZ_SEED") and not count:
            break
    print(f"fuzz: {seed - first} cases in {time.perf_counter() - start:.0f} s, kinds {sorted(kinds)}")
