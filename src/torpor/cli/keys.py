"""``torpor keys``: approvers' key pairs and the trusted keyring (G6; :mod:`torpor.keys`).

``init`` makes a person's Ed25519 key pair in their own folder (``$TORPOR_CONFIG_DIR``, by
default ``~/.config/torpor``; never under ``TORPOR_HOME``), prints the public key and trusts it
in the local keyring; ``add``/``remove``/``list`` manage the keyring (``$TORPOR_KEYRING``, else
the user's, else ``/etc/torpor/keyring``). Workers only read it.
"""

from __future__ import annotations

from typing import Annotated

import typer

from .. import keys as keyring_mod
from .. import signing
from ..errors import BadInputError
from .render import add_row, console, emit_json, new_table, plain
from .root import JsonFlag, options

keys_app = typer.Typer(
    name="keys",
    help="Approvers' keys and the trusted keyring: init, add, remove, list.\n\n"
    "Each approver signs decisions with a key of their own; workers trust only the keys in the "
    "keyring ($TORPOR_KEYRING, else ~/.config/torpor/keyring, else /etc/torpor/keyring).\n\n"
    "Example: torpor keys init --as alice",
    no_args_is_help=True,
)

Name = Annotated[str, typer.Option("--as", metavar="NAME", help="The approver's name.")]
DelegateFor = Annotated[
    str | None,
    typer.Option(
        "--delegate-for",
        metavar="NAMES",
        help="A delegate key (e.g. a console): it may sign only for these people "
        "(comma-separated; * for anyone).",
    ),
]


def _people(value: str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    people = tuple(p.strip() for p in value.split(",") if p.strip())
    if not people:
        raise BadInputError("--delegate-for needs at least one name (or *)")
    for p in people:
        if p != "*":
            keyring_mod.check_name(p, "--delegate-for")
    return people


@keys_app.command("init")
def init(
    ctx: typer.Context,
    name: Name,
    delegate_for: DelegateFor = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing key.")] = False,
    json_out: JsonFlag = False,
) -> None:
    """Make NAME's key pair in your own folder, print the public key, trust it locally.

    Give the printed `torpor keys add` line to whoever runs the workers (a delegate's line
    keeps its --delegate-for).

    Example: torpor keys init --as alice
    """
    settings = options(ctx).settings()
    people = _people(delegate_for)
    path, public = keyring_mod.generate(settings.config_dir(), name, force=force)
    ring = keyring_mod.Keyring.load(settings.keyring_path())
    blob, _ = keyring_mod.parse_public(public)
    if force:
        ring.remove(name)
    ring.add(keyring_mod.KeyEntry(name, blob, name, people))
    ring.save()
    fp = signing.fingerprint(blob)
    if json_out:
        emit_json(
            {
                "name": name,
                "private_key": str(path),
                "public_key": public,
                "fingerprint": fp,
                "keyring": str(ring.path),
                "delegate_for": list(people),
                "keys_add": add_line(name, public, people),
            }
        )
        return
    out = console()
    out.print(plain(f"made {name}'s key pair: private key {path} (mode 0600; keep it to yourself)"))
    out.print(plain(public))
    out.print(plain(f"fingerprint {fp}; trusted in the keyring {ring.path}"))
    out.print(
        plain(f"workers elsewhere trust it with: {add_line(name, public, people)}", style="cyan")
    )


def add_line(name: str, public: str, people: tuple[str, ...] = ()) -> str:
    """The ``torpor keys add`` command that trusts ``public`` for ``name`` elsewhere, with its
    delegation (``--delegate-for``) when the key is a delegate's, so a copied line keeps it."""
    opts = f" --delegate-for '{','.join(people)}'" if people else ""
    return f"torpor keys add {name}{opts} '{public}'"


#: The most ``keys add NAME @FILE`` reads of FILE: a public key line is about 100 bytes.
MAX_PUBLIC_KEY_BYTES = 16 * 1024


def read_public_file(path: str) -> str:
    """The text of a public key file, read with a bound (BadInputError for a file longer than
    :data:`MAX_PUBLIC_KEY_BYTES` — ``@/dev/zero`` — or one that is not text)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_PUBLIC_KEY_BYTES + 1)
    except OSError as exc:
        raise BadInputError(f"cannot read {path!r}: {exc.strerror}") from None
    if len(data) > MAX_PUBLIC_KEY_BYTES:
        raise BadInputError(
            f"{path!r} is longer than {MAX_PUBLIC_KEY_BYTES} bytes: not a public key file "
            "(expected one line 'ssh-ed25519 AAAA... [comment]')"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInputError(f"{path!r} is not text: not a public key file") from None


@keys_app.command("add")
def add(
    ctx: typer.Context,
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="Who signs with this key.", show_default=False)
    ],
    public_key: Annotated[
        str,
        typer.Argument(
            metavar="PUBLIC_KEY",
            help="'ssh-ed25519 AAAA... [comment]', or @FILE (e.g. @alice.pub).",
            show_default=False,
        ),
    ],
    delegate_for: DelegateFor = None,
    json_out: JsonFlag = False,
) -> None:
    """Trust NAME's public key in the keyring (decisions it signs will verify).

    Example: torpor keys add bob 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI... bob@laptop'
    """
    keyring_mod.check_name(name)
    text = public_key
    if public_key.startswith("@"):
        text = read_public_file(public_key[1:])
    blob, comment = keyring_mod.parse_public(text, "PUBLIC_KEY")
    ring = keyring_mod.Keyring.load(options(ctx).settings().keyring_path())
    entry = keyring_mod.KeyEntry(name, blob, comment, _people(delegate_for))
    added = ring.add(entry)
    if added:
        ring.save()
    if json_out:
        emit_json(
            {
                "name": name,
                "fingerprint": entry.fingerprint,
                "keyring": str(ring.path),
                "added": added,
            }
        )
        return
    verb = "trusted" if added else "was already trusted"
    console().print(plain(f"{name}'s key {entry.fingerprint} {verb} in the keyring {ring.path}"))


@keys_app.command("remove")
def remove(
    ctx: typer.Context,
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="Whose key(s) to remove.", show_default=False)
    ],
    fingerprint: Annotated[
        str | None,
        typer.Option("--key", metavar="FINGERPRINT", help="Only the key with this fingerprint."),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Remove NAME's key(s) from the keyring: decisions they signed are refused from now on,
    also those recorded but not yet acted on.

    Example: torpor keys remove alice
    """
    ring = keyring_mod.Keyring.load(options(ctx).settings().keyring_path())
    gone = ring.remove(name, fingerprint)
    if not gone:
        raise BadInputError(
            f"the keyring {ring.path} has no key for {name!r}"
            + (f" with fingerprint {fingerprint}" if fingerprint else "")
        )
    ring.save()
    if json_out:
        emit_json(
            {"name": name, "removed": [e.fingerprint for e in gone], "keyring": str(ring.path)}
        )
        return
    for e in gone:
        console().print(plain(f"removed {name}'s key {e.fingerprint} from {ring.path}"))


@keys_app.command("list")
def list_keys(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """The keys the keyring trusts: who, fingerprint, whom a delegate signs for.

    Example: torpor keys list
    """
    ring = keyring_mod.Keyring.load(options(ctx).settings().keyring_path())
    rows = [
        {
            "name": e.name,
            "fingerprint": e.fingerprint,
            "delegate_for": list(e.delegate_for),
            "comment": e.comment,
        }
        for e in ring.entries
    ]
    if json_out:
        emit_json({"keyring": str(ring.path), "exists": ring.exists, "keys": rows})
        return
    out = console()
    if not ring.exists:
        out.print(plain(f"no keyring at {ring.path} yet: torpor keys init --as NAME makes one"))
        return
    out.print(plain(f"keyring {ring.path}"))
    table = new_table("NAME", "FINGERPRINT", "SIGNS FOR", "COMMENT")
    for r in rows:
        add_row(
            table, r["name"], r["fingerprint"], ",".join(r["delegate_for"]) or "-", r["comment"]
        )
    out.print(table)


def register(app: typer.Typer) -> None:
    """Add the ``keys`` command group to ``app``."""
    app.add_typer(keys_app)
