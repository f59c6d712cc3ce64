"""Cold resume (issue 11): the small script a user would run to resume a crashed run.

    python bench/cold_resume.py build  URL STAMPS STEPS   # STEPS steps, then SIGKILL
    python bench/cold_resume.py resume URL STAMPS STEPS   # resume: first new step, SIGKILL

The workflow runs steps ``s0``, ``s1``, …; step ``STEPS`` (the first one not yet in the
history) appends ``time.time()`` to ``STAMPS`` as its body starts and SIGKILLs the process, so
the history stays as built and every resume is the same. The orchestrator
(``run_all.measure_cold``) stamps the time right before spawning the resume process: the
difference is interpreter start + ``import torpor`` + opening the runtime + ``resume`` up to
the first new step. Kept as small as a user's script (only ``os``, ``signal``, ``sys``,
``time`` and ``torpor`` imported); it prints ``T <phase> <time>`` after each phase, read by the
orchestrator to break the figure down.
"""

import os
import signal
import sys
import time

import torpor

t_import = time.time()
mode, url, stamps, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])


def work(i: int) -> int:
    if i == steps:
        with open(stamps, "a") as f:
            f.write(f"{time.time()!r}\n")
        os.kill(os.getpid(), signal.SIGKILL)
    return i


# crash_limit=0: every round dies at the same step on purpose (the default parks a run that
# crashed 5 times in a row as blocked, and the later rounds would measure nothing).
@torpor.workflow(name="bench.cold", crash_limit=0)
def cold(run, total):
    for i in range(total):
        run.step(f"s{i}", work, i)
    return total


rt = torpor.Runtime(url)
t_open = time.time()
print(f"T import {t_import!r}\nT open {t_open!r}", flush=True)
if mode == "build":
    rt.run("bench.cold", steps + 1, run_id="cold")
else:
    rt.resume("cold")
sys.exit("the run finished without reaching its next step")
