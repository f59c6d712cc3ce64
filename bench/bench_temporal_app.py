"""The Temporal workflow under benchmark (module level, as Temporal requires).

``BenchSteps.run(n, local)`` runs ``n`` sequential activities: ordinary activities (each
scheduled, started and completed through the server's durable history) or local activities
(run in the worker; their results are recorded in the history with the next workflow task).
"""

from datetime import timedelta

from temporalio import activity, workflow


@activity.defn(name="bench_step")
def bench_step(i: int) -> int:
    return i


@workflow.defn(name="BenchSteps", sandboxed=False)
class BenchSteps:
    @workflow.run
    async def run(self, n: int, local: bool) -> int:
        for i in range(n):
            if local:
                await workflow.execute_local_activity(
                    bench_step, i, start_to_close_timeout=timedelta(seconds=30)
                )
            else:
                await workflow.execute_activity(
                    bench_step, i, start_to_close_timeout=timedelta(seconds=30)
                )
        return n
