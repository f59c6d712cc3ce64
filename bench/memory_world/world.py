"""Assembling a seeded world: which turns plant which facts, where, in which words, and the
distractor turns around them (see the package doc)."""

from __future__ import annotations

import dataclasses
import json
import random
import re
from collections.abc import Callable
from typing import Any

from . import phrasing as ph
from . import shapes as sh
from .core import KINDS, Fact, Names, Probe, Turn, World, cue_words_in, haystack
from .vocab import FAMILIES, Vocab

_PERSONS = {
    "dev": ("ngozi", "priya", "tomasz", "ines", "kwame", "yuki", "farah", "oskar"),
    "heldout": ("aurelio", "bongani", "chiara", "dmitri", "esme", "henrik", "ilse", "joaquin"),
}
_GEOS = ("eu-north", "ap-south", "sa-east", "me-central")
_WORDS = ("amber", "basalt", "cinder", "delta", "ember", "fjord", "garnet", "harbor", "indigo")
GOALS = {
    "dev": "Work through the platform maintenance backlog: read the logs, notes and tickets, "
    "run what needs running, and keep track of what you learn and what you were told.",
    "heldout": "Audit the fleet before the quarter closes: go through the services' output, "
    "history and write-ups, and keep what matters for the hand-over.",
}


def facts_per_kind(turns: int) -> int:
    """How many facts of each kind a world of ``turns`` turns plants."""
    return max(2, min(turns // 8, 4 + turns // 50))


def make_world(turns: int, seed: int = 7, family: str = "dev") -> World:
    """The world of ``turns`` model turns for ``seed`` in phrasing ``family`` (``dev`` or
    ``heldout``): deterministic per (turns, seed, family). Raises ValueError for an unknown
    family or fewer than 12 turns."""
    if family not in FAMILIES:
        raise ValueError(f"phrasing family {family!r}: expected one of {sorted(FAMILIES)}")
    if turns < 12:
        raise ValueError(f"turns={turns}: a world needs at least 12 turns")
    for attempt in range(40):
        world = _build(turns, seed, family, attempt)
        if not collisions(world):
            return world
    raise RuntimeError(f"no collision-free world for turns={turns} seed={seed} {family}")


_TOKENS = re.compile(r"[a-z]+|[0-9]+")


def collisions(world: World) -> list[str]:
    """Probes found outside the turn that plants them (in another turn or in the goal), or
    not found in their own turn: each a line naming the fact and the probe. Empty for a
    world whose probes cannot be satisfied by accident."""
    texts = [haystack(t.texts()) for t in world.turns] + [world.goal]
    lowered = [t.lower() for t in texts]
    # Which texts hold each token (runs of letters or of digits): a probe's pattern is
    # bounded by non-word characters, so each token of its literal is a whole token wherever
    # it matches, and only the texts holding all of them need the regex (a long world would
    # otherwise take probes x turns searches).
    index: dict[str, set[int]] = {}
    for i, low in enumerate(lowered):
        for tok in set(_TOKENS.findall(low)):
            index.setdefault(tok, set()).add(i)
    everywhere = set(range(len(texts)))
    out = []
    for f in world.facts:
        for p in f.probes:
            lits = [p.text.lower()] + ([p.other.lower()] if p.kind == "near" else [])
            rx = p.pattern()
            maybe = everywhere
            for tok in {t for x in lits for t in _TOKENS.findall(x)}:
                maybe = maybe & index.get(tok, set())
            where = [
                i
                for i in sorted(maybe)
                if all(x in lowered[i] for x in lits) and rx.search(texts[i])
            ]
            if f.turn not in where:
                out.append(f"{f.id}: probe {p} not in its own turn {f.turn}")
            if any(i != f.turn for i in where):
                out.append(f"{f.id}: probe {p} also outside turn {f.turn}")
    return out


class _Builder:
    def __init__(self, turns: int, seed: int, family: str, attempt: int):
        self.family = family
        self.v: Vocab = FAMILIES[family]
        self.rng = random.Random(f"{family}:{seed}:{turns}:{attempt}")
        self.names = Names(random.Random(f"names:{family}:{seed}:{turns}:{attempt}"))
        self.d = sh.Distract(random.Random(f"d:{family}:{seed}:{turns}:{attempt}"), set())
        self.d.reserved = self.names.used_nums
        self.names.avoid = self.d.seen
        self.keys: set[str] = set()
        self.about = ""

    def tmpl(self, options: tuple[tuple[str, str], ...]) -> tuple[str, str]:
        return self.rng.choice(options)

    def svc(self) -> str:
        return self.rng.choice(self.v.services)

    def filler_say(self) -> str:
        return self.rng.choice(ph.FILLER_SAY[self.family]).format(
            svc=self.svc(), mod=self.d.pick(sh.MODS)
        )

    def unique(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        key = tool + json.dumps(args, sort_keys=True)
        while key in self.keys:
            args = {
                **args,
                **{next(iter(args)): f"{next(iter(args.values()))} -n {self.d.n(2, 99)}"},
            }
            key = tool + json.dumps(args, sort_keys=True)
        self.keys.add(key)
        return args

    # ---------------------------------------------------------- outputs without facts

    def text_output(
        self, insert: list[str], noisy: bool, tail: bool
    ) -> tuple[str, dict[str, Any], str]:
        """(tool, args, text) of a shell command whose output has ``insert`` in it."""
        shapes = sh.DEV_SHAPES if self.family == "dev" else sh.HELDOUT_SHAPES
        name = self.rng.choice(sorted(shapes))
        self.d.scale = self.rng.choice((1, 1, 1, 1, 2, 4, 8))  # some outputs run long
        text = shapes[name](self.d, insert, noisy, tail)
        self.d.scale = 1
        s, n = self.svc(), self.d.n(2, 9999)
        cmd = {
            "pytest": f"uv run pytest -q tests/{self.d.pick(sh.MODS)} --maxfail={n}",
            "build": f"./scripts/build.sh {s} --jobs {n % 8 + 1} --build-id {n}",
            "service-log": f"kubectl logs deploy/{s} --since=2026-11-{n % 28 + 1:02d}T0{n % 9}:00Z",
            "listing": f"ls -l /data/exports/{s}/{n}",
            "stack": f"cat /var/log/{s}/panic-{n}.log",
            "csv": f"./bin/export --service {s} --format csv --since-id {n}",
            "git-log": f"git log -n {n % 12 + 6} --skip {n} -- {self.d.pick(sh.DIRS)}/{s}",
            "kubectl": f"kubectl get pods -n {s} -o wide --chunk-size={n}",
            "journal": f"journalctl -u {s} --since '2026-11-{n % 28 + 1:02d} 0{n % 9}:00' -n {n}",
            "psql": f"psql -h {s}-db -c 'select * from pg_stat_user_tables limit {n}'",
        }[name]
        return "sh", {"cmd": cmd}, text

    def note(self, title: str, line: str, section: str, tail: bool) -> str:
        prose = ph.NOTE_PROSE[self.family]

        def para() -> str:
            return " ".join(
                self.rng.choice(prose).format(
                    svc=self.svc(),
                    n=self.d.n(100, 99999),
                    k=self.d.n(2, 60),
                    k2=f"{self.d.n(1, 30):02d}",
                )
                for _ in range(self.d.n(2, 4))
            )

        if self.family == "dev":
            head = [
                f"# ADR {self.d.n(10, 400)}: {title}",
                "",
                f"Date: 2026-11-{self.d.n(1, 30):02d}",
                "",
            ]
            body = ["## Context", "", para(), "", para(), ""]
            end = ["## Consequences", "", para(), ""]
        else:
            head = [
                f"RFC: {title}",
                "=" * 40,
                f"Authors: {self.d.pick(sh.PEOPLE)}, {self.d.pick(sh.PEOPLE)}",
                "",
            ]
            body = ["Summary", "-------", para(), "", "Background", "----------", para(), ""]
            end = ["Rollout", "-------", para(), ""]
        if not line:
            return "\n".join(head + body + end)
        mid = [section, "", line, ""]
        parts = head + body + end + mid if tail else head + body + mid + end
        return "\n".join(parts)

    def filler_turn(self, i: int, operator: str | None = None) -> Turn:
        say = self.filler_say()
        r = self.rng.random()
        if r < 0.2:
            tool, args = (
                "http_get",
                {
                    "url": f"https://{self.svc()}.internal/api/v1/{self.d.pick(sh.MODS)}"
                    f"?page={self.d.n(2, 9999)}"
                },
            )
            out: Any = sh.api_response(self.d, None, self.rng.random() < 0.3, False)
        elif r < 0.32:
            tool, args = (
                "read_file",
                {"path": f"docs/notes/{self.d.pick(sh.MODS)}-{self.d.n(2, 99999)}.md"},
            )
            out = {
                "path": args["path"],
                "text": self.note(f"{self.d.pick(sh.MODS)} notes", "", "", False),
            }
        else:
            tool, args, text = self.text_output([], self.rng.random() < 0.3, False)
            out = {"exit_code": 0, "output": text}
        return Turn(i, say, tool, self.unique(tool, args), output=out, operator=operator)

    # ---------------------------------------------------------- fact values

    def ident(self, sub: str) -> tuple[str, str, Probe]:
        """(what it names, the value, its probe) of an identifier of kind ``sub``."""
        s, n, dev = self.svc(), self.names.num, self.family == "dev"
        if sub == "path":
            if dev:
                v = f"/srv/{s}/releases/{s}-5.{n(41, 99)}.{n(31, 99)}-{self.names.hexs(8)}.tar.zst"
                return "the release tarball", v, Probe("exact", v)
            v = f"/mnt/{s}/snapshots/2026-12-{n(1, 28):02d}/part-{n(10000, 99999)}.parquet"
            return "the snapshot", v, Probe("exact", v)
        if sub == "hash":
            if dev:
                v = self.names.hexs(12)
                return "the commit that broke the import", v, Probe("exact", v)
            v = "sha256:" + self.names.hexs(64)
            return "the image digest", v, Probe("exact", v)
        if sub == "id":
            v = f"INC-{n(10000, 99999)}" if dev else f"CHG-{n(10000, 99999)}"
            return ("the incident" if dev else "the change request"), v, Probe("exact", v)
        if sub == "version":
            v = f"5.{n(41, 99)}.{n(31, 99)}" if dev else f"v6.{n(41, 99)}.{n(31, 99)}"
            return (f"the last good {s} build" if dev else f"{s} in prod"), v, Probe("exact", v)
        key = self.names.term(self.v.config_keys)
        num = str(n(1000, 99999))
        return key, num, Probe("near", key, num)

    def instruction_value(self, key: str) -> tuple[str, Probe]:
        n = self.names.num
        persons = _PERSONS[self.family]
        if key in ("sign-off", "pager", "rollback contact"):
            v = "@" + self.names.term(persons)
            return v, Probe("exact", v)
        if key == "workers":
            v = str(n(11, 96))
            return v, Probe("near", "workers", v, window=2)
        if key == "spend":
            v = str(n(10000, 99999))
            return f"USD {v} a month", Probe("exact", v)
        w = self.rng.choice(_WORDS)
        v = {
            "load tests": f"staging-{self.rng.choice(('eu', 'us', 'ap'))}-{n(100, 999)}",
            "push": f"release/{n(1000, 9999)}-hotfix",
            "freeze": f"v5.{n(41, 99)}.{n(31, 99)}",
            "canary tenant": f"tenant-{n(10000, 99999)}",
            "bucket": f"s3://artifacts-{w}-{n(1000, 9999)}",
            "region": f"{self.rng.choice(_GEOS)}-{n(100, 999)}",
            "reports": f"#rpt-{w}-{n(100, 999)}",
            "dataset": f"corpus-{w}-{n(1000, 9999)}",
            "window": f"MW-{n(1000, 9999)}",
            "billing account": f"acct-{n(10000, 99999)}",
            "procedure": f"https://wiki.example.org/runbooks/{n(10000, 99999)}",
        }[key]
        return v, Probe("exact", v)

    def comments(self, body: str, tail: bool) -> dict[str, Any]:
        d = self.d
        noise = (
            "LGTM",
            "rebased on main",
            f"CI green on {d.hexs(7)}",
            f"bumped to {d.ver()}",
            f"+1, seen on {d.pick(sh.HOSTS)} too",
            "moved to next sprint",
            f"dup of #{d.n(100, 9999)}?",
        )
        bodies = [d.pick(noise) for _ in range(d.n(4, 9))]
        bodies.insert(len(bodies) - 1 if tail else len(bodies) // 2, body)
        if self.family == "dev":
            return {
                "issue": f"OPS-{d.n(100, 9999)}",
                "state": "open",
                "comments": [
                    {
                        "id": d.n(10000, 999999),
                        "author": d.pick(sh.PEOPLE),
                        "created_at": d.ts(),
                        "body": x,
                    }
                    for x in bodies
                ],
            }
        nodes = [
            {
                "__typename": "IssueComment",
                "author": {"login": d.pick(sh.PEOPLE)},
                "createdAt": d.ts(),
                "bodyText": x,
            }
            for x in bodies
        ]
        return {
            "data": {
                "repository": {
                    "issue": {"number": d.n(100, 9999), "timelineItems": {"nodes": nodes}}
                }
            }
        }


def _plant(b: _Builder, i: int, kind: str, place: str) -> tuple[Turn, str, tuple[Probe, ...], str]:
    """(turn, statement, probes, template) of a fact of ``kind`` planted at turn ``i``."""
    fam, rng, names, v = b.family, b.rng, b.names, b.v
    svc = b.svc()
    filler = b.filler_turn(i)
    tool_out = place == "tool"
    noisy = rng.random() < 0.25
    tail = rng.random() < 0.6
    sub = ""
    if kind == "identifier":
        sub = rng.choice(("path", "hash", "id", "version", "number"))
        what, value, probe = b.ident(sub)
        fields = {"what": what, "value": value}
        probes: tuple[Probe, ...] = (probe,)
    elif kind == "decision":
        open_topics = [(t, o) for t, o in v.topics if len(set(o) - names.used_terms) >= 2]
        fresh = [(t, o) for t, o in open_topics if not set(o) & names.used_terms]
        topic, options = rng.choice(fresh or open_topics)
        chosen, rejected = names.term(options), names.term(options)
        reason, terms = rng.choice(v.reasons)
        if terms and not set(terms) <= names.used_terms:
            t = names.term(terms)
            reason, rp = reason.format(t=t), Probe("term", t)
        else:
            reason, _ = rng.choice([r for r in v.reasons if not r[1]])
            num = str(names.num(10000, 99999))
            reason, rp = reason.format(n=num), Probe("exact", num)
        fields = {
            "topic": topic,
            "chosen": chosen,
            "rejected": rejected,
            "reason": reason,
        }
        probes = (Probe("term", chosen), Probe("term", rejected), rp)
    elif kind == "failed":
        approach = names.term(v.approaches)
        token = names.term(tuple(e[0] for e in v.errors))
        clause = dict(v.errors).get(token, f"{token} at {{n}}")
        fields = {"approach": approach, "err": clause.format(n=names.num(1000, 65000))}
        probes = (Probe("term", approach), Probe("term", token))
    else:  # commitment, question
        a, n = names.term(v.action_terms), str(names.num(10000, 99999))
        fields = {"a": a, "n": n, "svc": svc}
        probes = (Probe("term", a), Probe("exact", n))
    # What the fact is about, in the world's own words (a probe turn names it: bench/
    # memory_probes.py); recorded beside the fact, never drawn from the generator's RNG.
    b.about = {
        "identifier": str(fields.get("what", "")),
        "decision": str(fields.get("topic", "")),
        "failed": str(fields.get("approach", "")),
    }.get(kind, f"{fields.get('a', '')} for {svc}")
    if not tool_out:
        name, t = b.tmpl(ph.SAY[fam][kind])
        say = t.format(**fields)
        turn = Turn(i, say, filler.tool, filler.args, output=filler.output)
        return turn, say, probes, f"{fam}.{kind}.say.{name}"
    intent = rng.choice(ph.INTENT_SAY[fam][kind]).format(**{"svc": svc, **fields})
    if kind in ("commitment",):
        name, t = b.tmpl(ph.COMMENTS[fam])
        line = t.format(**fields)
        args = b.unique(
            "http_get",
            {"url": f"https://tracker.example.org/api/issues/{svc}-{b.d.n(100, 9999)}/comments"},
        )
        turn = Turn(i, intent, "http_get", args, output=b.comments(line, tail))
        return turn, line, probes, f"{fam}.{kind}.comment.{name}"
    lines = ph.TOOL_LINES[fam][kind]
    if kind == "identifier":  # a template that fits what the value is
        fits = {"dev": {"number": ("kv",)}, "heldout": {"number": ("image",)}}[fam]
        allowed = fits.get(sub) or tuple(n for n, _ in lines if n not in ("kv", "bisect"))
        if sub == "hash" and fam == "heldout":
            allowed = ("bisect", "image", "latest")
        lines = tuple(x for x in lines if x[0] in allowed)
        fields = {**fields, "what": fields["what"].removeprefix("the ")}
    name, t = b.tmpl(lines)
    line = t.format(**fields)
    template = f"{fam}.{kind}.tool.{name}"
    if kind in ("decision", "question"):
        title = fields.get("topic") or f"{svc} follow-ups"
        section = {
            "decision": ("## Outcome", "Options considered\n------------------"),
            "question": ("## Open questions", "Open items\n----------"),
        }[kind][fam != "dev"]
        slug = str(title).replace(" ", "-").lower()[:30]
        folder = "docs/adr" if fam == "dev" else "rfcs"
        args = b.unique("read_file", {"path": f"{folder}/{b.d.n(10, 9999):04d}-{slug}.md"})
        out = {"path": args["path"], "text": b.note(str(title), line, section, tail)}
        return Turn(i, intent, "read_file", args, output=out), line, probes, template
    if kind == "identifier" and fam == "dev" and rng.random() < 0.35:
        row = {
            "id": f"rel_{b.d.hexs(12)}",
            "label": fields["what"],
            "value": fields["value"],
            "state": "current",
        }
        args = b.unique(
            "http_get", {"url": f"https://{svc}.internal/api/v1/releases?page={b.d.n(2, 9999)}"}
        )
        out = sh.api_response(b.d, row, noisy, tail)
        return (
            Turn(i, intent, "http_get", args, output=out),
            json.dumps(row),
            probes,
            f"{fam}.{kind}.json",
        )
    if kind == "failed":
        tool, args, text = b.text_output([line], noisy, True)
        args = b.unique(tool, {"cmd": f"{args['cmd']} --with {fields['approach']}"})
        if rng.random() < 0.3:
            return (
                Turn(i, intent, tool, args, raises=text),
                intent + " / " + line,
                probes,
                template + ".raised",
            )
        out = {"exit_code": 1, "output": text}
        return Turn(i, intent, tool, args, output=out), intent + " / " + line, probes, template
    tool, args, text = b.text_output([line], noisy, tail)
    out = {"exit_code": 0, "output": text}
    return Turn(i, intent, tool, b.unique(tool, args), output=out), line, probes, template


def _place_of(rng: random.Random, kind: str) -> str:
    if kind == "instruction":
        return "operator"
    return "tool" if rng.random() < (0.35 if kind == "commitment" else 0.5) else "model"


def _build(turns: int, seed: int, family: str, attempt: int) -> World:
    b = _Builder(turns, seed, family, attempt)
    per = facts_per_kind(turns)
    kinds = [k for k in KINDS for _ in range(per)]
    b.rng.shuffle(kinds)
    slots = sorted(b.rng.sample(range(1, turns - 1), len(kinds)))
    plan = dict(zip(slots, kinds, strict=True))
    fresh = list(b.v.instructions)
    b.rng.shuffle(fresh)
    active: dict[str, int] = {}
    out_turns: list[Turn] = []
    facts: list[Fact] = []
    count = dict.fromkeys(KINDS, 0)
    for i in range(turns):
        kind = plan.get(i)
        if kind is None:
            out_turns.append(b.filler_turn(i))
            continue
        count[kind] += 1
        fid = f"{kind}-{count[kind]}"
        place = _place_of(b.rng, kind)
        subject = ""
        if kind == "instruction":
            if fresh and (not active or b.rng.random() < 0.6):
                subject, key, forms = fresh.pop()
                name, t = b.tmpl(ph.SAY[family]["instruction"])
            else:
                subject = b.rng.choice(sorted(active))
                key, forms = next((k, f) for s, k, f in b.v.instructions if s == subject)
                name, t = b.tmpl(ph.SUPERSEDE[family])
                old = facts[active[subject]]
                facts[active[subject]] = dataclasses.replace(old, superseded_by=fid)
                name = "supersede." + name
            value, probe = b.instruction_value(key)
            s = b.rng.choice(forms).format(v=value)
            text = t.format(s=s, S=s[0].upper() + s[1:])
            turn = b.filler_turn(i, operator=text)
            probes: tuple[Probe, ...] = (probe,)
            statement, template = text, f"{family}.instruction.{name}"
            active[subject] = len(facts)
        else:
            turn, statement, probes, template = _plant(b, i, kind, place)
        out_turns.append(turn)
        cue_free = not cue_words_in("\n".join(turn.texts()))
        about = subject if kind == "instruction" else b.about
        facts.append(
            Fact(fid, kind, place, i, statement, probes, template, cue_free, subject, about=about)
        )
    return World(family, seed, GOALS[family], tuple(out_turns), tuple(facts))


PLANTERS: dict[str, Callable[..., Any]] = {"plant": _plant}
