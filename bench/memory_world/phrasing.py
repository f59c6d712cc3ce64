"""How each family states each kind of fact, written the way agents, tools and people write
(terse chat, commit-message style, ticket comments, design-note prose, log lines). Some
templates carry cue words, most do not; a fact counts as cue-free only when its whole turn has
none (:func:`bench.memory_world.core.cue_words_in`).

Fields: identifier ``{what}`` ``{value}``; decision ``{topic}`` ``{chosen}`` ``{rejected}``
``{reason}``; failed ``{approach}`` ``{err}``; instruction ``{s}`` (the sentence) ``{S}``
(capitalised); commitment and question ``{a}`` (a term) ``{svc}`` ``{n}`` (a number).
"""

from __future__ import annotations

#: family -> kind -> (template name, text) for facts stated in the model's text (instruction:
#: the operator's message).
SAY: dict[str, dict[str, tuple[tuple[str, str], ...]]] = {
    "dev": {
        "identifier": (
            ("chat", "ok, {what} is {value} - noting it for later"),
            ("result-line", "Result: {what} = {value}"),
            ("commit", "pin {what} to {value}"),
            ("ticket", "FYI {what}: {value}."),
        ),
        "decision": (
            ("cue", "Decision: {chosen} for {topic}, not {rejected}, because {reason}."),
            ("chat", "going with {chosen} for {topic} over {rejected}: {reason}"),
            ("commit", "switch {topic} to {chosen} ({rejected} dropped, {reason})"),
            ("prose", "{chosen} it is for {topic}. {rejected} is out; {reason}."),
        ),
        "failed": (
            ("cue", "The {approach} approach failed: {err}."),
            ("chat", "tried {approach}, no luck: {err}"),
            ("commit", "revert {approach} ({err})"),
            ("ticket", "{approach} does not work here ({err}), dropping it."),
        ),
        "instruction": (
            ("ops", "ops: {s}."),
            ("chat", "heads up - {s}, thanks"),
            ("tagged", "[ops] {S}. (mkovacs)"),
            ("cue", "We decided: {s}."),
        ),
        "commitment": (
            ("chat", "I'll do the {a} for {svc} once #{n} lands."),
            ("todo", "TODO(agent): {a} for {svc} after PR {n} merges"),
            ("eod", "Will write up the {a} by end of day; tracking it in #{n}."),
            ("cue", "Committed to the {a} for {svc} (ticket {n}) so that on-call has it."),
        ),
        "question": (
            ("open", "Open question: does the {a} cover tenant {n}?"),
            ("chat", "not sure yet whether the {a} applies to shard {n}, need to ask"),
            ("terse", "? unclear if the {a} runs before or after job {n}"),
            ("cue", "Could not conclude whether the {a} touches tenant {n}."),
        ),
    },
    "heldout": {
        "identifier": (
            ("arrow", "{value} <- {what}, keep"),
            ("self-note", "note to self: {what} lives at {value}"),
            ("record", "Recording {what}: {value}"),
            ("cue", "Found {what}: {value}"),
        ),
        "decision": (
            (
                "standardise",
                "We'll standardise on {chosen} ({topic}); {rejected} is out: {reason}.",
            ),
            ("terse", "{topic}: {chosen}. Not {rejected} - {reason}."),
            ("adr", "Adopt {chosen}, reject {rejected}. Rationale: {reason}."),
            ("cue", "Chose {chosen} over {rejected} for {topic} since {reason}."),
        ),
        "failed": (
            ("dead-end", "{approach} is a dead end: {err}"),
            ("backing-out", "Backing out {approach} - {err}."),
            ("no-go", "no go with {approach}; it dies with {err}"),
            ("cue", "{approach} resulted in an error: {err}"),
        ),
        "instruction": (
            ("operator", "[operator] {S}."),
            ("lead", "from the on-call lead: {s}"),
            ("please", "Please {s}. Ty."),
            ("cue", "Final decision from ops: {s}."),
        ),
        "commitment": (
            ("list", "On my list: {a} for {svc}, due with release {n}."),
            ("promised", "Promised the {a} to the infra channel; ETA build {n}."),
            ("hook", "I'm on the hook for the {a} (PLAT-{n})."),
            ("cue", "Concluded I owe them a {a} by sprint {n}."),
        ),
        "question": (
            ("still-open", "Still open: is the {a} scoped to account {n}?"),
            ("nobody", "Nobody knows yet if the {a} covers region {n}."),
            ("owners", "Q for the owners: does the {a} include batch {n}?"),
            ("cue", "Unresolved, no result yet on whether the {a} applies to batch {n}."),
        ),
    },
}

#: An operator message that replaces an earlier one on the same subject.
SUPERSEDE: dict[str, tuple[tuple[str, str], ...]] = {
    "dev": (
        ("change", "change of plan: {s}."),
        ("scratch", "scratch my earlier note, {s}."),
        ("update", "update: {s} from now on"),
    ),
    "heldout": (
        ("replaces", "Update - {s} (replaces what I said earlier)"),
        ("correction", "Correction: {s}."),
        ("new-rule", "New rule, the old one is void: {s}."),
    ),
}

#: Lines stating a fact inside a tool's text output (identifier, failed) or a design note
#: (decision, question).
TOOL_LINES: dict[str, dict[str, tuple[tuple[str, str], ...]]] = {
    "dev": {
        "identifier": (
            ("published", "==> published {what}: {value}"),
            ("kv", "{what}={value}"),
            ("done", "done: {what} {value}"),
        ),
        "failed": (
            ("tail", "{err}\nexit status 1"),
            ("abort", "aborting: {err}"),
            ("cue", "ERROR: {err}"),
        ),
        "decision": (
            (
                "we-use",
                "We use {chosen} for {topic}. {rejected} was considered and dropped: {reason}.",
            ),
            ("outcome", "**Outcome:** {chosen}. Alternatives: {rejected} (rejected, {reason})."),
            ("cue", "**Decision:** {chosen} for {topic}, because {reason}; not {rejected}."),
        ),
        "question": (
            ("bullet", "- does the {a} cover tenant {n}? (owner unknown)"),
            ("tbd", "- TBD: the {a} for job {n}, before or after the import?"),
            ("ask", "- ask platform whether the {a} applies to shard {n}"),
        ),
    },
    "heldout": {
        "identifier": (
            ("bisect", "first bad commit: {value} ({what})"),
            ("image", "  {what}: {value}"),
            ("latest", "# latest {what} -> {value}"),
        ),
        "failed": (
            ("panic", "panic: {err}"),
            ("fatal", "FATAL {err}"),
            ("cue", "error: {err} (failed)"),
        ),
        "decision": (
            ("status", "Status: accepted. {chosen} for {topic}; {rejected} rejected on {reason}."),
            ("table", "| {topic} | **{chosen}** | {rejected} | {reason} |"),
            ("cue", "We decided on {chosen} because {reason} ({rejected} dropped)."),
        ),
        "question": (
            ("unknown", "* Unknown: is the {a} scoped to account {n}?"),
            ("followup", "* Follow-up: whether the {a} covers region {n}."),
            ("pending", "* Pending answer: does the {a} include batch {n}?"),
        ),
    },
}

#: A comment in a ticket's JSON (commitment and question in a tool's output).
COMMENTS: dict[str, tuple[tuple[str, str], ...]] = {
    "dev": (
        ("ill", "@lchen: I'll have the {a} for {svc} ready by build {n}"),
        ("owning", "owning the {a} for {svc}; lands with #{n}"),
        ("mine", "mine: {a} ({svc}), target PR {n}"),
    ),
    "heldout": (
        ("will", "rdiaz will send the {a} for {svc} with release {n}"),
        ("taking", "Taking the {a} ({svc}), due PLAT-{n}."),
        ("eta", "{a} for {svc}: on me, ETA sprint {n}"),
    ),
}

#: What the model says on a turn that plants nothing (``{svc}`` a service, ``{mod}`` a module).
FILLER_SAY: dict[str, tuple[str, ...]] = {
    "dev": (
        "Looking at {svc} next.",
        "Reading the {mod} tests.",
        "Checking the build output for {svc}.",
        "Next file: the {mod} module.",
        "Let me look at the {svc} logs around the deploy.",
        "Listing what the export wrote.",
    ),
    "heldout": (
        "Next: {svc} logs.",
        "Inspecting the rollout of {svc}.",
        "Pulling the {mod} history.",
        "Skimming the {svc} export.",
        "Dumping the {mod} table stats.",
        "Reading the {svc} journal.",
    ),
}

#: What the model says before a tool output that states a fact (it does not state it).
INTENT_SAY: dict[str, dict[str, tuple[str, ...]]] = {
    "dev": {
        "identifier": ("Checking where {svc} put its output.", "Let me see what got published."),
        "decision": ("Reading the design note on {topic}.", "Opening the ADR for {topic}."),
        "failed": ("Trying {approach} for the {svc} import.", "Giving {approach} a go."),
        "commitment": ("Reading the ticket thread for {svc}.",),
        "question": ("Reading the notes on {svc}.",),
    },
    "heldout": {
        "identifier": ("Looking up the {svc} rollout details.", "Pulling the {svc} metadata."),
        "decision": ("Opening the {topic} write-up.", "Reading the RFC on {topic}."),
        "failed": ("Attempting {approach} on {svc}.", "Running {svc} with {approach}."),
        "commitment": ("Fetching the {svc} issue comments.",),
        "question": ("Reading the {svc} planning doc.",),
    },
}

#: Design-note prose around a decision or a question (``{n}`` numbers, ``{svc}`` a service).
NOTE_PROSE: dict[str, tuple[str, ...]] = {
    "dev": (
        "The {svc} fleet handled {n} requests a second last week across {k} nodes.",
        "Today the nightly job writes about {n} MB per tenant and keeps {k} days of history.",
        "Context: ticket #{n} asked for this after the incident on 2026-11-{k2}.",
        "Latency at p50 is {k} ms; at p99 it is {n} ms on the replay set.",
        "The current setup dates from release 2.{k}.0 and was sized for {n} tenants.",
        "Owners: platform (@lchen, @jpatel); reviewers signed off on 2026-11-{k2}.",
    ),
    "heldout": (
        "Traffic on {svc} peaks at {n} rps around 14:{k2} UTC.",
        "Storage grows by {n} GiB a month; the budget line is {k} percent over.",
        "See RFC-{n} and the thread from 2026-11-{k2} for background.",
        "Median build time is {k} min; the slowest {n} jobs account for most of it.",
        "The first version shipped in 0.{k}.0 for a fleet of {n} hosts.",
        "Stakeholders: infra, security (@sbergstrom), finance; last review 2026-11-{k2}.",
    ),
}
