"""The Restate service under benchmark, as an ASGI app for hypercorn (see bench/servers.py).

``BenchSteps.steps(n)`` runs ``n`` sequential ``ctx.run`` blocks: each one's result is
journaled, and acknowledged by the server, before the next block starts.
"""

import restate

svc = restate.Service("BenchSteps")


def one(i: int) -> int:
    return i


@svc.handler()
async def steps(ctx: restate.Context, n: int) -> int:
    for i in range(n):
        await ctx.run_typed(f"s{i}", one, i=i)
    return n


app = restate.app(services=[svc])
