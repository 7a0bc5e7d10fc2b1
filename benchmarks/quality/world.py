"""A seeded generator of an evolving world: the life of a long-running agent, with answers known at every moment.

The world has entities (users, services, projects) whose attributes change
over world time (ports, endpoints, versions, owners, meeting preferences,
goals, deadlines, ...), task signatures ("deploy the billing API") whose
strategies improve over time — a later version is better, which only the
outcomes of using it reveal — and a large volume of irrelevant memories
(chit-chat, logs, tool output, observations, remarks that name an entity
without stating any attribute) whose topics drift over the agent's life.

What it produces, for ``n_memories`` memories:

- ``World.memories``: the memories in write order, each with its text, world
  time, the agent's importance rating (1-10) and, for facts, the fact key and
  value it states; for strategies, the task signature and version.
- ``World.executions``: moments when the agent performs a task and so
  retrieves a strategy; each carries pre-drawn random numbers, so every system
  compared faces the same luck (common random numbers).
- ``World.checkpoints``: moments at which queries with known answers are
  asked ("Which port does the billing API listen on?").

Ground truth (all in :class:`World`): the current value of a fact key at a
moment (after ``at`` memories were written) is the value of the version with
the latest ``valid_from`` (world time) among those written so far — a late
arrival that is world-older never becomes current. A memory *answers* a fact
query when it states the key's current value (the version that set it, or a
restatement of it); it is *outdated* when it states another value of a key.
The best strategy of a signature is its newest version written so far (its
true success rate is the highest); older versions are outdated.

``synthetic_vectors`` builds embedding-like vectors with the same structure
for sizes where embedding every text is too slow: versions of the same fact
lie near each other and near their queries, irrelevant memories are spread
over drifting topics, remarks naming an entity sit near it.

Phrasing halves (``phrasing``): ``"tuning"`` words every fact, question and
remark naming an entity with the templates of this module and draws users,
services and projects from its name pools — the half a system may be tuned
on. ``"heldout"`` uses ``phrasing_heldout.py`` beside this file instead: its
statements, restatements, late facts and questions per attribute (no
"Reminder: ..." wrappers around restatements), its first and last names,
service domains and project codenames, and its remarks naming an entity. Both
halves share everything else: strategies, task logs, noise topics and value
pools (so an on-call engineer is a tuning name in both), and the world's
structure for a given ``(n_memories, seed)`` draws the same random numbers.
The held-out half is the one a system must not have been tuned on.
``"validation"`` uses ``phrasing_validation.py`` the same way (a third half,
written independently of the other two, with name pools disjoint from both):
it checks that a change generalises beyond the tuning wording before the
held-out run is spent; its figures are not held-out figures.

Text-only changes (``text_share``): an agent does not always know that a
sentence changes a fact. Each keyed memory (fact, restatement, late fact) has
a ``form``: ``"keyed"`` (written with its fact key and entity),
``"text_entity"`` (no fact key, the entity declared) or ``"text_named"`` (no
fact key and no entity: the entity is only named in the text). A share
``text_share`` of them are text-only, half of each kind. Forms come from a
random stream of their own, so texts, questions and ground truth are the same
whatever the share.

Everything is a pure function of ``(n_memories, seed, phrasing, text_share, shape settings)``.
"""

from __future__ import annotations

import bisect
import enum
import functools
import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from benchmarks.quality.phrasing_heldout import AttributePhrasing

WORLD_START = datetime(2023, 1, 2, tzinfo=timezone.utc)
"""World time zero (hours are counted from here); every world ends in the past of any real run."""

FloatMatrix = npt.NDArray[np.float32]


class Category(enum.IntEnum):
    """What a memory is, for the ground truth and the synthetic vectors."""

    FACT = 0
    """A keyed statement that sets a value: the first value of a key or a change."""
    RESTATEMENT = 1
    """Restates the key's current value in other words."""
    LATE_FACT = 2
    """A value learnt late: its ``valid_from`` is older than the current version's, so it is history at once."""
    STRATEGY = 3
    """How to perform a task (a signature), one version of it."""
    TASK_LOG = 4
    """A neutral log line written when the agent performed a task."""
    MENTION = 5
    """Chit-chat or a log that names an entity without stating any of its attributes."""
    NOISE = 6
    """Chit-chat, logs, tool output, observations on the topics of the moment."""


KEYED = (Category.FACT, Category.RESTATEMENT, Category.LATE_FACT)


def _items(text: str) -> tuple[str, ...]:
    """A value pool written compactly: items separated by ``;`` (line breaks are spaces)."""
    return tuple(item.strip() for item in " ".join(text.split()).split(";") if item.strip())


# ---- content: names and value pools --------------------------------------------------------------------------

FIRST_NAMES = _items(
    """
    Alice; Bruno; Chen; Dalia; Emeka; Fatima; Gustavo; Hana; Ivan; Jana; Kwame; Leila; Mateo; Nadia; Oskar;
    Priya; Quentin; Rosa; Sven; Tomoko; Umar; Valentina; Wei; Ximena; Yusuf; Zofia; Aarav; Beatriz; Caleb;
    Divya; Elif; Farid; Greta; Hiroshi; Ines; Jonas; Kateryna; Luca; Maya; Nikolai; Olga; Pedro; Rania; Samuel;
    Tariq; Ursula; Viktor; Wanjiru; Yara; Zane; Amara; Benedikt; Carmen; Dmitri; Esther; Felix; Gabriela; Hugo;
    Isla; Joaquin; Kenji; Lucia; Marek; Noor; Omar; Paula; Rafael; Sakura; Theo; Uma; Vera; William; Xiu; Yosef;
    Zara; Anders; Bianca; Cyrus; Daria; Enzo; Freya; Goran; Helena; Idris; Julia; Kofi; Lena; Mohammed; Nora;
    Ola; Pia; Rhys; Selin; Tobias
    """
)
LAST_NAMES = _items(
    """
    Moreau; Silva; Zhang; Haddad; Okafor; Rahman; Pereira; Sato; Petrov; Novak; Mensah; Farouk; Garcia; Khan;
    Lindqvist; Raman; Dubois; Romero; Berg; Yamada; Siddiqui; Rossi; Wang; Lopez; Demir; Kowalski; Mehta; Costa;
    Brooks; Iyer; Yilmaz; Karimi; Schulz; Tanaka; Ferreira; Jansen; Bondarenko; Bianchi; Cohen; Volkov; Ivanova;
    Alves; Nasser; Owusu; Fischer; Nakamura; Ortega; Hansen; Kariuki; Mizrahi; Eriksen; Adeyemi; Weber;
    Takahashi; Santos; Horvat; Abbasi; Larsen; Moretti; Duarte
    """
)
SERVICE_DOMAINS = _items(
    """
    billing; auth; search; notifications; payments; inventory; checkout; reporting; ingest; geo; pricing;
    recommendation; media; ledger; fraud; shipping; catalog; identity; audit; analytics; scheduler; email; sms;
    loyalty; refunds; tax; invoicing; onboarding; profile; session; export; import; webhook; feature-flag;
    metrics; tracing; routing; quota; chat; document; thumbnail; translation; payroll; forecast; warehouse;
    support; survey; coupon
    """
)
SERVICE_ROLES = (
    ("api", "API"),
    ("service", "service"),
    ("gateway", "gateway"),
    ("worker", "worker"),
    ("proxy", "proxy"),
    ("indexer", "indexer"),
    ("scheduler", "scheduler"),
    ("exporter", "exporter"),
    ("store", "store"),
    ("bridge", "bridge"),
    ("sync", "sync job"),
    ("router", "router"),
)
CODENAMES = _items(
    """
    Falcon; Aurora; Nimbus; Kestrel; Orion; Juniper; Basalt; Cobalt; Heron; Lyra; Marlin; Nova; Obsidian;
    Pelican; Quartz; Raven; Sequoia; Tundra; Umbra; Vega; Willow; Zephyr; Atlas; Borealis; Cinder; Delta; Ember;
    Fjord; Granite; Harbor; Indigo; Jasper; Kodiak; Lantern; Meridian; Nebula; Onyx; Puffin; Quill; Riviera;
    Sierra; Tempest; Ursa; Vortex; Wren; Yukon; Zenith; Acacia; Bramble; Cascade; Dune; Echo; Flint; Glacier;
    Halcyon; Iris; Jetstream; Kelp; Lotus; Monsoon; Nightjar; Opal; Prism; Quasar; Redwood; Saffron; Tidal;
    Upland; Velvet; Wildfire; Xenon; Yarrow; Zircon; Albatross; Beacon; Caravel
    """
)
CODENAME_SUFFIXES = ("", " II", " Next", " Lite", " Prime", " 2", " X", " Core")
TEAMS = _items(
    """
    Payments; Platform; SRE; Data Infra; Identity; Growth; Search Quality; Mobile; Core API; Developer
    Experience; Billing Ops; Trust and Safety; Checkout; Storage; Networking; ML Platform; Observability;
    Security; Integrations; Localization; Partner Engineering; Release Engineering; Customer Tools; Fulfilment;
    Analytics; Edge; Messaging; Compliance; Risk; Infrastructure
    """
)
REGIONS = _items(
    """
    eu-west-1; eu-central-1; us-east-1; us-west-2; ap-southeast-1; ap-northeast-1; eu-north-1; ca-central-1;
    sa-east-1; ap-south-1; europe-west4; us-central1; asia-east1; uksouth; westeurope
    """
)
DATABASES = _items(
    """
    PostgreSQL 15; PostgreSQL 16; MySQL 8.0; MongoDB 7; Cassandra 4.1; DynamoDB; CockroachDB; Redis 7;
    ClickHouse; SQLite; Aurora PostgreSQL; Spanner; ScyllaDB; Elasticsearch 8; MariaDB 11
    """
)
ENVS = _items(
    """
    prod; eu1; us2; internal; edge; k8s; live; apac; prod-blue; prod-green
    """
)
URL_PATHS = _items(
    """
    v1; v2; v3; api/v2; api/v3; rpc; graphql; public/v1; internal/v4; svc
    """
)
DOMAINS = _items(
    """
    acme-internal.net; corp.example.com; svc.northwind.io; api.globex.dev; initech.cloud
    """
)
MEETING_PREFS = _items(
    """
    mornings before 11; late afternoons; no meetings on Fridays; short 15-minute calls; in-person meetings;
    video calls with the camera off; async written updates instead of meetings; Tuesday and Thursday afternoons;
    walking one-on-ones; slots right after lunch; all meetings batched on Wednesday; 30-minute slots with an
    agenda sent the day before; early calls at 8:30; phone calls rather than video; meetings only with a shared
    doc open; no meetings before 10; Monday mornings for planning; two 45-minute blocks a week at most
    """
)
LANGUAGES = _items(
    """
    Python; Go; Rust; TypeScript; Kotlin; Java; Elixir; C++; Swift; Scala; Ruby; C#; Haskell; Clojure; Zig;
    OCaml; Julia; Dart
    """
)
EDITORS = _items(
    """
    VS Code; Neovim; Emacs; IntelliJ IDEA; PyCharm; Zed; Sublime Text; Helix; Vim; GoLand; Cursor; Xcode;
    Android Studio; Kate
    """
)
CONTACTS = _items(
    """
    a Slack DM; email; a phone call; Microsoft Teams chat; a message in the #ops channel; SMS; a comment on the
    ticket; a calendar invite with context; Signal; the team mailing list; a Loom video; a direct message on
    Mattermost
    """
)
CITIES = _items(
    """
    Lisbon (WET); Berlin (CET); Nairobi (EAT); Tokyo (JST); Toronto (EST); São Paulo (BRT); Bangalore (IST);
    Warsaw (CET); Austin (CST); Seoul (KST); Dublin (GMT); Cape Town (SAST); Singapore (SGT); Vancouver (PST);
    Istanbul (TRT); Mexico City (CST); Helsinki (EET); Melbourne (AEST); Lagos (WAT); Madrid (CET); Taipei
    (CST); Denver (MST); Athens (EET)
    """
)
ROLES = _items(
    """
    staff engineer; engineering manager; product manager; SRE lead; data scientist; principal engineer; tech
    lead; designer; director of engineering; security engineer; QA lead; solutions architect; developer
    advocate; senior backend engineer; mobile engineer; ML engineer; release manager
    """
)
GOALS = _items(
    """
    ship the mobile onboarding flow; cut p99 latency of checkout below 300 ms; learn Rust properly; reduce
    on-call pages by half; get the SOC 2 audit done; hire two backend engineers; migrate the team off Jenkins;
    write the platform roadmap for next year; get promoted to staff; launch the partner API; move all services
    to Kubernetes; finish the data retention policy; improve test coverage of the billing code to 80%; speak at
    a conference; automate the release process; clean up the feature-flag debt; mentor the new graduates; run
    the incident review programme; deprecate the v1 endpoints; reduce the cloud bill by 20%; document every
    public API; build the fraud model v2; set up the EU data residency; replace the legacy search cluster; lead
    the accessibility audit; get the team to weekly releases
    """
)
DIETS = _items(
    """
    vegetarian; vegan; gluten-free; no dietary restrictions; pescatarian; halal; lactose-free; kosher; no nuts
    (allergy); low-carb
    """
)
WORK_HOURS = _items(
    """
    9:00-17:00; 8:00-16:00; 10:00-18:30; 7:30-15:30; 11:00-19:00; 9:30-18:00; 6:00-14:00; 12:00-20:00;
    8:30-17:30; flexible hours with core time 13:00-16:00
    """
)
MILESTONES = _items(
    """
    the beta launch in Germany; SOC 2 readiness; migrating all customers to v2; the public API launch; feature
    parity with the old app; the first paying customer; GA in the EU region; the load test at 10x; the design
    review sign-off; the internal dogfood release; the security pen-test; the data migration; the Black Friday
    freeze; the pricing experiment; the partner pilot with Globex; the v3 schema rollout; the accessibility
    certification; the iOS app store submission; the on-prem installer
    """
)
STATUSES = _items(
    """
    on track; at risk; blocked on legal review; paused; in beta; waiting for design; in code freeze; behind
    schedule by two weeks; ahead of schedule; in user testing; blocked on the vendor contract; in the hardening
    sprint
    """
)
COMPANIES = _items(
    """
    Globex; Initech; Umbrella Retail; Stark Logistics; Wayne Health; Tyrell Energy; Soylent Foods; Cyberdyne
    Labs; Hooli; Vandelay Imports; Wonka Industries; Gringotts Bank; Oscorp; Aperture Labs; the internal finance
    team; the EU sales team; the board; Massive Dynamic
    """
)
MONTHS = _items(
    """
    January; February; March; April; May; June; July; August; September; October; November; December
    """
)


# ---- attributes ----------------------------------------------------------------------------------------------

ValueFn = Callable[[random.Random, "str | None", "Entity", "World"], str]


@dataclass(frozen=True)
class Attribute:
    """One attribute type: who has it, how often it changes, how it is said and asked."""

    name: str
    entity_type: str
    kind: str
    """Memory kind an agent would give it: "fact" or "preference"."""
    source: str
    """Where such a statement comes from: "user", "tool" or "agent"."""
    volatility: float
    """Relative rate of change."""
    value: ValueFn
    statements: tuple[str, ...]
    """Templates with ``{e}`` (the entity as written) and ``{v}`` (the value)."""
    restatements: tuple[str, ...]
    late: tuple[str, ...]
    """Templates of a value learnt late, with ``{d}`` the date it became true."""
    questions: tuple[str, ...]


def _pick(rng: random.Random, pool: Sequence[str], previous: str | None) -> str:
    """A value from ``pool`` other than ``previous`` (reverting to an older value is allowed)."""
    while True:
        value = rng.choice(pool)
        if value != previous:
            return value


def _port(rng: random.Random, previous: str | None, entity: Entity, world: World) -> str:
    common = ("8080", "8443", "9000", "3000", "5000", "8000", "9090", "7000", "6060", "4000")
    while True:
        value = rng.choice(common) if rng.random() < 0.3 else str(rng.randrange(1025, 65000))
        if value != previous:
            return value


def _endpoint(rng: random.Random, previous: str | None, entity: Entity, world: World) -> str:
    while True:
        host = entity.slug if rng.random() < 0.7 else f"{entity.slug}-{rng.choice(('new', 'v2', 'beta', 'next'))}"
        port = f":{rng.choice(('8443', '443', '9443', '8080'))}" if rng.random() < 0.25 else ""
        value = f"https://{host}.{rng.choice(ENVS)}.{world.domain}{port}/{rng.choice(URL_PATHS)}"
        if value != previous:
            return value


def _version(rng: random.Random, previous: str | None, entity: Entity, world: World) -> str:
    if previous is None:
        return f"v{rng.randrange(1, 4)}.{rng.randrange(0, 12)}.{rng.randrange(0, 9)}"
    major, minor, patch = (int(x) for x in previous[1:].split("."))
    roll = rng.random()
    if roll < 0.1:
        return f"v{major + 1}.0.0"
    if roll < 0.45:
        return f"v{major}.{minor + 1}.0"
    return f"v{major}.{minor}.{patch + rng.randrange(1, 4)}"


def _person(rng: random.Random, previous: str | None, entity: Entity, world: World) -> str:
    while True:
        value = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
        if value != previous:
            return value


def _rate(rng: random.Random, previous: str | None, entity: Entity, world: World) -> str:
    while True:
        value = f"{rng.choice((50, 100, 200, 250, 500, 750, 1000, 1500, 2000, 5000, 10000))} requests per second"
        if value != previous:
            return value


def _date(rng: random.Random, previous: str | None, entity: Entity, world: World) -> str:
    while True:
        day = WORLD_START + timedelta(days=rng.randrange(30, 1400))
        long_form = rng.random() < 0.5
        value = f"{MONTHS[day.month - 1]} {day.day}, {day.year}" if long_form else day.strftime("%Y-%m-%d")
        if value != previous:
            return value


def _budget(rng: random.Random, previous: str | None, entity: Entity, world: World) -> str:
    while True:
        value = f"${rng.randrange(20, 900) * 1000:,}"
        if value != previous:
            return value


def _repo(rng: random.Random, previous: str | None, entity: Entity, world: World) -> str:
    while True:
        team = rng.choice(TEAMS).lower().replace(" ", "-")
        value = f"git.{world.domain}/{team}/{entity.slug}{rng.choice(('', '-app', '-core', '-monorepo', '-service'))}"
        if value != previous:
            return value


def _tracker(rng: random.Random, previous: str | None, entity: Entity, world: World) -> str:
    while True:
        letters = entity.slug.replace("-", "")[:3].upper()
        value = rng.choice(
            (
                f"the Jira board {letters}",
                f"the Jira board {letters}{rng.randrange(2, 9)}",
                f"Linear team {entity.name.split()[-1]}",
                f"GitHub Projects board #{rng.randrange(10, 400)}",
                f"the Asana project {entity.slug}",
            )
        )
        if value != previous:
            return value


def _pool(values: Sequence[str]) -> ValueFn:
    def choose(rng: random.Random, previous: str | None, entity: Entity, world: World) -> str:
        return _pick(rng, values, previous)

    return choose


_RESTATE = (
    "Reminder: {s}",
    "Double-checked today and it still holds: {s}",
    "As noted before, {s}",
)

ATTRIBUTES: tuple[Attribute, ...] = (
    # -- services
    Attribute(
        "port",
        "service",
        "fact",
        "tool",
        1.0,
        _port,
        (
            "{e} now listens on port {v}.",
            "{e} was moved to port {v} after the load-balancer change.",
            "Heads-up: {e} is served on port {v} from today.",
            "Config check: {e} binds to port {v}.",
            "Ops changed the port of {e} to {v}.",
        ),
        ("{e} is still listening on port {v}.", "Confirmed again that {e} answers on port {v}."),
        ("Found an old changelog: from {d}, {e} listened on port {v}.",),
        (
            "Which port does {e} listen on?",
            "What port is {e} on?",
            "On which port should I reach {e}?",
            "What's the port number of {e}?",
        ),
    ),
    Attribute(
        "endpoint",
        "service",
        "fact",
        "tool",
        0.8,
        _endpoint,
        (
            "The base URL of {e} is now {v}.",
            "{e} moved behind a new endpoint: {v}.",
            "Clients should call {e} at {v}.",
            "Updated the service catalog: {e} lives at {v}.",
        ),
        ("{e} is still reachable at {v}.",),
        ("Learnt late that starting {d} the endpoint of {e} had been {v}.",),
        (
            "What is the endpoint URL of {e}?",
            "Where do I call {e}? I need its URL.",
            "Which base URL does {e} use?",
        ),
    ),
    Attribute(
        "version",
        "service",
        "fact",
        "tool",
        1.2,
        _version,
        (
            "{e} was upgraded to version {v}.",
            "Production now runs {v} of {e}.",
            "{e} is on release {v} now.",
            "Rolled {e} forward to {v}.",
        ),
        ("Checked the dashboard: {e} still reports version {v}.",),
        ("According to the release log, {e} went to {v} on {d}.",),
        (
            "Which version of {e} is running in production?",
            "What release is {e} on?",
            "What's the current version of {e}?",
        ),
    ),
    Attribute(
        "owner",
        "service",
        "fact",
        "agent",
        0.4,
        _pool(TEAMS),
        (
            "{e} is now owned by the {v} team.",
            "Ownership of {e} moved to the {v} team.",
            "The {v} team took over {e}.",
            "Who to ask about {e}: the {v} team owns it now.",
        ),
        ("The {v} team still owns {e}.",),
        ("Turns out the {v} team had owned {e} since {d}.",),
        ("Which team owns {e}?", "Who is responsible for {e}?", "Who owns {e} these days?"),
    ),
    Attribute(
        "region",
        "service",
        "fact",
        "tool",
        0.3,
        _pool(REGIONS),
        (
            "{e} is deployed in {v}.",
            "{e} was migrated to the {v} region.",
            "Infra note: {e} runs in {v} now.",
        ),
        ("{e} is still running in {v}.",),
        ("The migration record says {e} had been in {v} since {d}.",),
        ("Which region does {e} run in?", "Where is {e} hosted, which cloud region?"),
    ),
    Attribute(
        "database",
        "service",
        "fact",
        "tool",
        0.3,
        _pool(DATABASES),
        (
            "{e} stores its data in {v}.",
            "{e} was migrated to {v}.",
            "The datastore behind {e} is now {v}.",
        ),
        ("{e} still uses {v} as its database.",),
        ("An old design doc shows {e} was on {v} from {d}.",),
        ("Which database does {e} use?", "What's the datastore behind {e}?"),
    ),
    Attribute(
        "oncall",
        "service",
        "fact",
        "tool",
        0.9,
        _person,
        (
            "{v} is on call for {e} this week.",
            "On-call for {e} rotated to {v}.",
            "Page {v} if {e} breaks; they are on call now.",
        ),
        ("{v} is still the on-call engineer for {e}.",),
        ("The rota shows {v} had been on call for {e} from {d}.",),
        ("Who is on call for {e}?", "Who should I page if {e} goes down?"),
    ),
    Attribute(
        "rate_limit",
        "service",
        "fact",
        "tool",
        0.5,
        _rate,
        (
            "{e} is rate-limited to {v}.",
            "The rate limit of {e} was changed to {v}.",
            "Gateway config: {e} allows {v} per client.",
        ),
        ("The limit of {e} is still {v}.",),
        ("From {d} the rate limit of {e} had been {v}, says the audit log.",),
        ("What is the rate limit of {e}?", "How many requests per second does {e} allow?"),
    ),
    # -- users
    Attribute(
        "meeting_preference",
        "user",
        "preference",
        "user",
        0.6,
        _pool(MEETING_PREFS),
        (
            "{e} prefers {v} for meetings.",
            "{e} told me they now want {v} when we meet.",
            "For meetings, {e} asked for {v} from now on.",
            "Meeting preference of {e}: {v}.",
        ),
        ("{e} reminded me again: {v} for meetings.",),
        ("{e} mentioned that since {d} they had preferred {v} for meetings.",),
        (
            "What does {e} prefer for meetings?",
            "How does {e} like meetings to be scheduled?",
            "Any meeting preference I should respect for {e}?",
        ),
    ),
    Attribute(
        "language",
        "user",
        "preference",
        "user",
        0.3,
        _pool(LANGUAGES),
        (
            "{e} prefers to write code in {v}.",
            "{e} switched to {v} as their main language.",
            "When pairing, {e} wants to use {v}.",
        ),
        ("{e} still prefers {v} for new code.",),
        ("{e} said that from {d} they had mostly written {v}.",),
        ("Which programming language does {e} prefer?", "What language should I use when writing code for {e}?"),
    ),
    Attribute(
        "editor",
        "user",
        "preference",
        "user",
        0.3,
        _pool(EDITORS),
        (
            "{e} uses {v} as their editor now.",
            "{e} moved to {v} for editing.",
            "{e}'s editor of choice is {v}.",
        ),
        ("{e} is still on {v}.",),
        ("{e} had been using {v} since {d}, it turns out.",),
        ("Which editor does {e} use?", "What's {e}'s editor of choice?"),
    ),
    Attribute(
        "contact",
        "user",
        "preference",
        "user",
        0.5,
        _pool(CONTACTS),
        (
            "The best way to reach {e} is {v}.",
            "{e} asked to be contacted via {v}.",
            "{e} prefers {v} for anything urgent.",
        ),
        ("{e} confirmed: {v} is still the way to reach them.",),
        ("{e} said that from {d} they preferred {v} for contact.",),
        ("How should I contact {e}?", "What's the best way to reach {e}?"),
    ),
    Attribute(
        "location",
        "user",
        "fact",
        "user",
        0.3,
        _pool(CITIES),
        (
            "{e} is based in {v} now.",
            "{e} relocated to {v}.",
            "{e} works from {v}.",
        ),
        ("{e} is still working from {v}.",),
        ("{e} had actually moved to {v} back on {d}.",),
        ("Where is {e} based?", "Which city and timezone is {e} in?"),
    ),
    Attribute(
        "role",
        "user",
        "fact",
        "agent",
        0.3,
        _pool(ROLES),
        (
            "{e}'s role is now {v}.",
            "{e} took on the role of {v}.",
            "New title for {e}: {v}.",
        ),
        ("{e} still has the role of {v}.",),
        ("HR records show {e} took the role of {v} on {d}.",),
        ("What is {e}'s role?", "What's the job title of {e}?"),
    ),
    Attribute(
        "goal",
        "user",
        "preference",
        "user",
        0.7,
        _pool(GOALS),
        (
            "{e}'s current goal is to {v}.",
            "{e} is focused on trying to {v} this quarter.",
            "{e} said the priority now is to {v}.",
        ),
        ("{e} is still working to {v}.",),
        ("{e} mentioned that since {d} the goal had been to {v}.",),
        ("What is {e} working toward right now?", "What's {e}'s current goal?"),
    ),
    Attribute(
        "diet",
        "user",
        "preference",
        "user",
        0.2,
        _pool(DIETS),
        (
            "{e}'s dietary preference: {v}.",
            "For team lunches, order {v} food for {e}.",
            "When ordering food for {e}: {v}.",
        ),
        ("Still {v} for {e} at lunches.",),
        ("{e} had been {v} since {d}, they told me.",),
        ("What should I order for {e} at the team lunch?", "Does {e} have a dietary preference?"),
    ),
    Attribute(
        "working_hours",
        "user",
        "preference",
        "user",
        0.4,
        _pool(WORK_HOURS),
        (
            "{e} works {v} local time now.",
            "{e}'s working hours changed to {v}.",
            "Don't ping {e} outside {v}.",
        ),
        ("{e} still keeps {v}.",),
        ("From {d}, {e} had been working {v}.",),
        ("What are {e}'s working hours?", "When is {e} available during the day?"),
    ),
    # -- projects
    Attribute(
        "deadline",
        "project",
        "fact",
        "agent",
        0.8,
        _date,
        (
            "The deadline for {e} moved to {v}.",
            "{e} is due on {v}.",
            "New target date for {e}: {v}.",
            "{e} must ship by {v}.",
        ),
        ("The date for {e} is still {v}.",),
        ("The steering minutes show that on {d} the deadline of {e} had been set to {v}.",),
        ("When is {e} due?", "What's the deadline for {e}?", "By when does {e} have to ship?"),
    ),
    Attribute(
        "lead",
        "project",
        "fact",
        "agent",
        0.4,
        _person,
        (
            "{v} now leads {e}.",
            "{e} is led by {v}.",
            "Leadership of {e} passed to {v}.",
        ),
        ("{v} is still leading {e}.",),
        ("It turns out {v} had taken over {e} on {d}.",),
        ("Who leads {e}?", "Who is the lead of {e}?"),
    ),
    Attribute(
        "milestone",
        "project",
        "fact",
        "agent",
        0.7,
        _pool(MILESTONES),
        (
            "The current milestone of {e} is {v}.",
            "{e} is now aiming for {v}.",
            "Next up for {e}: {v}.",
        ),
        ("{e} is still working toward {v}.",),
        ("The plan from {d} had {e} aiming for {v}.",),
        ("What's the current milestone for {e}?", "What is {e} aiming for right now?"),
    ),
    Attribute(
        "status",
        "project",
        "fact",
        "agent",
        1.0,
        _pool(STATUSES),
        (
            "{e} status: {v}.",
            "{e} is {v} as of today.",
            "Weekly update: {e} is {v}.",
        ),
        ("No change: {e} is {v}.",),
        ("The report dated {d} had {e} as {v}.",),
        ("What's the status of {e}?", "How is {e} doing?"),
    ),
    Attribute(
        "budget",
        "project",
        "fact",
        "agent",
        0.4,
        _budget,
        (
            "The budget of {e} is now {v}.",
            "{e} got a budget of {v}.",
            "Finance approved {v} for {e}.",
        ),
        ("The budget of {e} stays at {v}.",),
        ("Finance records show that {e} had {v} from {d}.",),
        ("What's the budget for {e}?", "How much money does {e} have?"),
    ),
    Attribute(
        "repository",
        "project",
        "fact",
        "tool",
        0.3,
        _repo,
        (
            "The code for {e} lives in {v}.",
            "{e} moved its repository to {v}.",
            "Clone {v} to work on {e}.",
        ),
        ("{e}'s code is still in {v}.",),
        ("Git history shows {e} had moved to {v} on {d}.",),
        ("Where is the repository of {e}?", "Which repo holds the code for {e}?"),
    ),
    Attribute(
        "tracker",
        "project",
        "fact",
        "agent",
        0.3,
        _tracker,
        (
            "{e} tracks its work in {v}.",
            "Tickets for {e} moved to {v}.",
            "File bugs for {e} in {v}.",
        ),
        ("{e} still uses {v} for tickets.",),
        ("From {d}, {e} had been tracked in {v}.",),
        ("Where are the tickets for {e} tracked?", "Where do I file a bug for {e}?"),
    ),
    Attribute(
        "stakeholder",
        "project",
        "fact",
        "agent",
        0.4,
        _pool(COMPANIES),
        (
            "The main stakeholder for {e} is now {v}.",
            "{e} is being built for {v}.",
            "{v} became the key customer of {e}.",
        ),
        ("{v} is still the main stakeholder of {e}.",),
        ("Since {d}, {v} had been the main stakeholder of {e}.",),
        ("Who is the main stakeholder for {e}?", "Which customer is {e} built for?"),
    ),
)
ATTRIBUTE_INDEX = {a.name: i for i, a in enumerate(ATTRIBUTES)}


# ---- strategies ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskType:
    """A kind of task the agent performs for an entity, and the approaches it may learn for it."""

    name: str
    entity_type: str
    phrase: str
    """What doing the task is called in a log line, with ``{e}``."""
    questions: tuple[str, ...]
    approaches: tuple[str, ...]


STRATEGY_TEMPLATES = (
    "Strategy for {task}: {a}.",
    "Playbook ({task}): {a}.",
    "Lesson learned about {task}: {a}.",
    "How I now handle {task}: {a}.",
)
TASK_LOG_TEMPLATES = (
    "Worked on {task} today (ticket {t}).",
    "Started {task}; notes are in {t}.",
    "Log: {task} in progress, tracked as {t}.",
    "Picked up {t}: {task}.",
)

TASK_TYPES: tuple[TaskType, ...] = (
    TaskType(
        "deploy",
        "service",
        "deploying {e}",
        ("How should I deploy {e}?", "What's the right way to roll out a new build of {e}?"),
        (
            "build the image locally, copy it to the hosts and restart the systemd unit by hand",
            "run a rolling update with kubectl and watch the pods until they are Ready",
            "do a blue-green switch behind the load balancer and keep the old stack for an hour",
            "ship a canary to 5% of traffic, compare error rates for 30 minutes, then promote",
            "use helm upgrade --atomic from the release pipeline so a failed rollout reverts itself",
            "merge to the release branch and let ArgoCD sync, then run the smoke tests",
        ),
    ),
    TaskType(
        "incident",
        "service",
        "handling an outage of {e}",
        ("What should I do when {e} goes down?", "How do I handle an outage of {e}?"),
        (
            "restart every pod at once and check again after a minute",
            "check the dashboard, roll back the last deploy, then page the owner",
            "fail over to the standby region first, then investigate",
            "open an incident channel, name a commander, and roll back within 10 minutes",
            "turn off the newest feature flags one by one while watching the error rate",
            "scale the deployment up twice and look for a noisy client in the access logs",
        ),
    ),
    TaskType(
        "schema_migration",
        "service",
        "running a schema migration on {e}",
        ("How should I run a schema migration on {e}?", "What's the safe way to change the schema of {e}?"),
        (
            "apply the migration directly in production during office hours",
            "take a full backup and run it in the Sunday maintenance window",
            "expand and contract: add columns, backfill in batches, switch reads, drop later",
            "rehearse on a restored snapshot, then run it online with gh-ost",
            "run it behind a feature flag with dual writes for a week before the cutover",
        ),
    ),
    TaskType(
        "cost_review",
        "service",
        "cutting the cloud cost of {e}",
        ("How do I cut the cloud bill of {e}?", "What's the best way to reduce the cost of {e}?"),
        (
            "downsize every instance by one size and see what breaks",
            "buy a one-year savings plan for the baseline load",
            "move the batch work to spot instances and autoscale on queue depth",
            "profile the hot endpoints, cache the top queries, then right-size",
            "archive cold data to object storage and shrink the database",
        ),
    ),
    TaskType(
        "release_notes",
        "project",
        "writing the release notes for {e}",
        ("How do I write the release notes for {e}?", "What's the process for release notes of {e}?"),
        (
            "paste the raw commit log into the wiki",
            "group the merged PRs by label and add a summary paragraph on top",
            "draft from the changelog fragments, then get the PM to review",
            "generate from conventional commits, then rewrite for customers",
            "write three highlights with screenshots and link the full list",
        ),
    ),
    TaskType(
        "flaky_tests",
        "project",
        "dealing with flaky tests in {e}",
        ("How should I deal with flaky tests in {e}?", "What do I do about the flaky CI of {e}?"),
        (
            "re-run the pipeline until it passes",
            "quarantine the flaky test and file a ticket for its owner",
            "loop the test 50 times locally with a fixed seed, then fix the timing assumption",
            "add a flake-rate dashboard and fail the build only on new flakes",
            "replace sleeps with explicit waits and mock the network in unit tests",
        ),
    ),
    TaskType(
        "onboarding",
        "project",
        "onboarding a new engineer to {e}",
        ("How do I onboard a new engineer to {e}?", "What's the best onboarding plan for {e}?"),
        (
            "send them the wiki link and let them explore",
            "pair with them for a day on a small bug, then give them a starter ticket",
            "a one-week plan: setup script, architecture talk, three graded starter tickets",
            "record a codebase tour video and assign a buddy for the first month",
            "have them ship a tiny change to production on day one with a mentor",
        ),
    ),
    TaskType(
        "weekly_report",
        "user",
        "preparing the weekly report for {e}",
        ("How do I prepare the weekly report for {e}?", "What format does the weekly update for {e} need?"),
        (
            "send a long email listing everything that happened",
            "three bullet points: shipped, blocked, next",
            "a one-page doc with metric charts and risks, sent on Friday morning",
            "a short Loom video plus a table of open risks",
            "update the shared dashboard and send a two-line summary",
        ),
    ),
    TaskType(
        "code_review",
        "user",
        "getting a code review from {e}",
        ("How should I ask {e} for a code review?", "What's the best way to get {e} to review a PR?"),
        (
            "open one big PR at the end of the sprint",
            "small PRs under 300 lines with a clear description and a test plan",
            "a short design note first, then stacked PRs that each build",
            "ping them in chat with a link and a summary of the risky parts",
            "book a 20-minute walkthrough for anything touching the data model",
        ),
    ),
)


# ---- noise ---------------------------------------------------------------------------------------------------

NOISE_TOPICS: dict[str, tuple[str, ...]] = {
    "weekend": (
        "{name} spent the weekend {hobby} near {place}.",
        "Small talk with {name}: they went {hobby} on Saturday and it rained the whole time.",
        "{name} is planning to go {hobby} next weekend if the weather holds.",
        "Heard that {name} finally tried {hobby} and loved it.",
    ),
    "food": (
        "Lunch today was {food} from the place around the corner.",
        "{name} recommended the {food} at the new canteen.",
        "The team ordered {food} for the retro.",
        "Someone left {food} in the office fridge again.",
    ),
    "movies": (
        "{name} watched {movie} and would not stop talking about it.",
        "Movie night poll: {movie} won with {n} votes.",
        "Half the team has seen {movie}; no spoilers in #random please.",
    ),
    "sports": (
        "{name} is excited about the game of {team} on {day}.",
        "The office five-a-side lost {n}-{n2} on {day}.",
        "{team} won again; {name} is unbearable today.",
    ),
    "weather": (
        "It is {weather} today; the commute took {n} minutes.",
        "Forecast for {day}: {weather}.",
        "{name} got caught in the {weather} on the way in.",
    ),
    "travel": (
        "{name} is flying to {place} on {day} for a family visit.",
        "Booked a train to {place} for the offsite.",
        "{name} recommends the old town of {place} in spring.",
    ),
    "pets": (
        "{name}'s dog joined the video call again.",
        "{name} adopted a cat called {pet}.",
        "Office pet rule reminder: dogs only on {day}s.",
    ),
    "books": (
        "{name} is reading {book} and recommends it.",
        "Book club picked {book} for next month.",
        "Finished {book}; the middle part drags.",
    ),
    "hiring": (
        "Interviewed a candidate for the {role} position; strong on systems design.",
        "{name} is running the take-home review for the {role} opening.",
        "Hiring sync moved to {day} at {time}.",
        "Sent feedback on {n} CVs for the {role} role.",
    ),
    "conference": (
        "{name} submitted a talk to a conference in {place}.",
        "The conference in {place} announced its schedule; {n} talks on observability.",
        "Slides for the meetup are due on {day}.",
    ),
    "office": (
        "The coffee machine on the {floor} floor is broken again.",
        "Facilities says the Wi-Fi upgrade happens on {day}.",
        "Meeting room {room} has a broken screen.",
        "Fire drill scheduled for {day} at {time}.",
    ),
    "planning": (
        "Quarterly planning starts on {day}; bring your top three bets.",
        "{name} shared a draft of the OKRs for next quarter.",
        "The all-hands moved to {day} at {time}.",
        "Retro notes: too many meetings, not enough focus time.",
    ),
    "security": (
        "Security training is due by {day}.",
        "Phishing test this week: {n}% clicked the link.",
        "Reminder to rotate personal access tokens before {day}.",
    ),
    "customers": (
        "Customer call with {company} went well; they asked about SSO.",
        "{company} reported a typo on the pricing page.",
        "Support queue has {n} open tickets this morning.",
    ),
    "ci": (
        "CI run #{n} finished in {n2} minutes.",
        "Build cache hit rate was {pct}% today.",
        "The runner pool was saturated for {n} minutes after lunch.",
        "Dependabot opened {n} PRs overnight.",
    ),
    "tools": (
        "pytest: {n} passed, {n2} skipped in {sec}s.",
        "git log shows {n} commits on main since {day}.",
        "Ran the linter: {n} warnings, none new.",
        "Disk usage on the build host is at {pct}%.",
    ),
    "monitoring": (
        "[{ts}] INFO worker-{n} processed {n2} jobs in {sec}s",
        "[{ts}] WARN cache miss ratio at {pct}% on node-{n}",
        "[{ts}] INFO GC pause {ms} ms on host-{n}",
        "[{ts}] ERROR connection reset by peer (retry {n} of 5)",
        "[{ts}] INFO nightly backup completed: {n2} GB in {n} minutes",
    ),
    "learning": (
        "Read an article about {tech}; worth trying on a side project.",
        "{name} gave a lunch-and-learn on {tech}.",
        "Bookmarked a tutorial on {tech} for later.",
    ),
    "music": (
        "{name} shared a playlist of {genre} for focus time.",
        "Someone is playing {genre} in the quiet room again.",
    ),
    "family": (
        "{name} is on parental leave from {day}.",
        "{name}'s kid starts school next week.",
        "{name} will be out on {day} for a family event.",
    ),
    "health": (
        "Ergonomics check: {name} got a new chair.",
        "Step challenge: {name} is leading with {n2} steps.",
        "Flu season: {n} people out sick today.",
    ),
    "finance": (
        "Expense reports are due on {day}.",
        "Travel budget for the offsite is approved.",
        "{name} asked how to file a receipt for the conference ticket.",
    ),
}
MENTION_TEMPLATES = (
    "Had a quick sync with {user} about unrelated hiring plans.",
    "{user} shared a funny meme in the team channel.",
    "{user} was out sick today.",
    "Reviewed a PR from {user}; mostly naming nits.",
    "{user} asked about the offsite agenda.",
    "Coffee chat with {user} about {hobby}.",
    "[{ts}] INFO {svc_slug}: health check ok ({ms} ms)",
    "[{ts}] WARN {svc_slug}: p99 latency {ms} ms over the last 5 minutes",
    "Dashboard for {svc} looked normal this morning.",
    "Someone asked in #help whether {svc} has docs; pointed them to the wiki.",
    "{svc} showed up in the weekly error report with {n} minor errors.",
    "{proj} demo went fine; people asked good questions.",
    "Put {proj} on the agenda for the next all-hands.",
    "{proj} has a new logo proposal from the design team.",
    "Read through the retro notes of {proj}.",
)
FILLERS: dict[str, tuple[str, ...]] = {
    "name": FIRST_NAMES,
    "hobby": _items(
        """
        hiking; sailing; climbing; cycling; kayaking; birdwatching; skiing; running a half-marathon;
        gardening; pottery; camping; fishing; surfing; baking sourdough; playing chess
        """
    ),
    "place": _items(
        """
        Porto; Kyoto; Cape Town; Bergen; Oaxaca; Tallinn; Hoi An; Marrakesh; Ljubljana; Hobart; Valparaíso;
        Zanzibar; Bruges; Kraków; Queenstown; Granada; Tbilisi; Chiang Mai
        """
    ),
    "food": _items(
        """
        pad thai; a burrito bowl; ramen; falafel wraps; pizza; sushi; dumplings; a poke bowl; lentil soup;
        shakshuka; biryani; tacos; bibimbap; pho; moussaka; empanadas
        """
    ),
    "movie": _items(
        """
        Dune; Oppenheimer; Past Lives; Spirited Away; The Matrix; Arrival; Parasite; Inception; Everything
        Everywhere All at Once; Amélie; The Grand Budapest Hotel; Interstellar
        """
    ),
    "team": _items("the Lakers; Arsenal; FC Porto; the Yankees; Bayern; the All Blacks; Boca Juniors"),
    "day": _items("Monday; Tuesday; Wednesday; Thursday; Friday; Saturday; Sunday"),
    "weather": _items("pouring rain; thick fog; a heatwave; snow; a thunderstorm; strong wind; hail"),
    "pet": _items("Miso; Pixel; Biscuit; Luna; Tofu; Mochi; Pepper; Nori"),
    "book": _items(
        """
        Designing Data-Intensive Applications; The Phoenix Project; Project Hail Mary; Klara and the Sun;
        Thinking, Fast and Slow; The Pragmatic Programmer; Piranesi; Sapiens; A Philosophy of Software
        Design
        """
    ),
    "role": _items("frontend; SRE; data engineer; designer; support lead; backend; mobile; QA"),
    "company": COMPANIES,
    "floor": _items("second; third; fourth; fifth; ground"),
    "room": _items("Everest; Kilimanjaro; Fuji; Denali; Elbrus; Aconcagua"),
    "tech": _items(
        """
        WebAssembly; eBPF; vector databases; property-based testing; CRDTs; Nix; io_uring; structured
        concurrency; feature stores; OpenTelemetry
        """
    ),
    "genre": _items("lo-fi beats; baroque music; synthwave; jazz; ambient; bossa nova"),
    "time": _items("9:30; 10:00; 11:15; 13:00; 14:30; 15:45; 16:00; 17:30"),
}
_SLOT = re.compile(r"\{(\w+)\}")


def _mentions_by_type(templates: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Remarks naming an entity, grouped by the entity type their slots name."""
    return {
        "user": tuple(t for t in templates if "{user}" in t),
        "service": tuple(t for t in templates if "{svc" in t),
        "project": tuple(t for t in templates if "{proj}" in t),
    }


# ---- phrasing halves -----------------------------------------------------------------------------------------

PHRASINGS = ("tuning", "heldout", "validation")


@dataclass(frozen=True)
class Wording:
    """How one attribute is said and asked in one phrasing half (slots as in :class:`Attribute`)."""

    statements: tuple[str, ...]
    restatements: tuple[str, ...]
    late: tuple[str, ...]
    questions: tuple[str, ...]


@dataclass(frozen=True)
class Phrasing:
    """Everything that differs between the phrasing halves, chosen once per world (see the module docstring)."""

    name: str
    wordings: tuple[Wording, ...]
    """Per attribute, in the order of ``ATTRIBUTES``."""
    restate_wrappers: tuple[str, ...]
    """Sentences with ``{s}`` that wrap a statement into a restatement (tuning only)."""
    first_names: tuple[str, ...]
    last_names: tuple[str, ...]
    service_domains: tuple[str, ...]
    codenames: tuple[str, ...]
    mention_templates: tuple[str, ...]
    mentions_by_type: dict[str, tuple[str, ...]]


def _written_apart(
    name: str,
    wordings: Mapping[str, AttributePhrasing],
    first_names: Sequence[str],
    last_names: Sequence[str],
    service_domains: Sequence[str],
    codenames: Sequence[str],
    mention_templates: Sequence[str],
) -> Phrasing:
    """A half written in a module of its own (no restatement wrappers), its wordings keyed by attribute name."""
    return Phrasing(
        name=name,
        wordings=tuple(
            Wording(tuple(p.statements), tuple(p.restatements), tuple(p.late), tuple(p.questions))
            for p in (wordings[a.name] for a in ATTRIBUTES)
        ),
        restate_wrappers=(),
        first_names=tuple(first_names),
        last_names=tuple(last_names),
        service_domains=tuple(service_domains),
        codenames=tuple(codenames),
        mention_templates=tuple(mention_templates),
        mentions_by_type=_mentions_by_type(mention_templates),
    )


@functools.cache
def phrasing_for(name: str) -> Phrasing:
    """The phrasing half called ``name`` (one of ``PHRASINGS``); raises ValueError for another name."""
    if name == "tuning":
        return Phrasing(
            name=name,
            wordings=tuple(Wording(a.statements, a.restatements, a.late, a.questions) for a in ATTRIBUTES),
            restate_wrappers=_RESTATE,
            first_names=FIRST_NAMES,
            last_names=LAST_NAMES,
            service_domains=SERVICE_DOMAINS,
            codenames=CODENAMES,
            mention_templates=MENTION_TEMPLATES,
            mentions_by_type=_mentions_by_type(MENTION_TEMPLATES),
        )
    if name == "heldout":
        from benchmarks.quality import phrasing_heldout as heldout

        return _written_apart(
            name,
            heldout.HELDOUT_PHRASING,
            heldout.HELDOUT_FIRST_NAMES,
            heldout.HELDOUT_LAST_NAMES,
            heldout.HELDOUT_SERVICE_DOMAINS,
            heldout.HELDOUT_CODENAMES,
            heldout.HELDOUT_MENTION_TEMPLATES,
        )
    if name == "validation":
        from benchmarks.quality import phrasing_validation as validation

        return _written_apart(
            name,
            validation.VALIDATION_PHRASING,
            validation.VALIDATION_FIRST_NAMES,
            validation.VALIDATION_LAST_NAMES,
            validation.VALIDATION_SERVICE_DOMAINS,
            validation.VALIDATION_CODENAMES,
            validation.VALIDATION_MENTION_TEMPLATES,
        )
    raise ValueError(f"unknown phrasing {name!r}; pick from {', '.join(PHRASINGS)}")


FORMS = ("keyed", "text_entity", "text_named")
"""How a keyed memory is written: with its fact key, as text with its entity, or as text naming the entity only."""


def _draw_form(rng: random.Random, text_share: float) -> str:
    """The form of the next keyed memory; always two draws, so the stream does not depend on ``text_share``."""
    text_only = rng.random() < text_share
    half = rng.random() < 0.5
    if not text_only:
        return "keyed"
    return "text_entity" if half else "text_named"


# ---- the world -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entity:
    """A user, service or project the agent knows about."""

    index: int
    type: str
    id: str
    """Stable id, also the ``entity`` an agent would give memevo, e.g. ``"service:billing-api"``."""
    name: str
    slug: str
    aliases: tuple[str, ...]
    """Ways of writing it; the first is the canonical one."""
    intro: float
    """Fraction of the life when the agent first hears of it."""
    until: float
    """Fraction of the life after which nothing about it changes any more (it stays true)."""


@dataclass(frozen=True, slots=True)
class FactKey:
    """An (entity, attribute) pair that holds one value at a time."""

    index: int
    entity: int
    attribute: int


@dataclass(frozen=True, slots=True)
class Signature:
    """A task the agent performs for one entity, with its strategy versions' true success rates."""

    index: int
    id: str
    """The ``task_signature`` an agent would give memevo, e.g. ``"deploy:billing-api"``."""
    task: int
    entity: int
    rates: tuple[float, ...]
    """True success rate of version 0, 1, ... (increasing: a later version is better)."""
    approaches: tuple[int, ...]
    """Index into the task type's approaches, per version."""


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One memory as the agent writes it (write order = ``index``; the agent's turn is ``index + 1``)."""

    index: int
    text: str
    category: Category
    kind: str
    """"fact", "preference", "strategy" or "episode"."""
    source: str
    """"user", "tool", "agent" or "reflection"."""
    time_h: float
    """World time of the write, hours after WORLD_START."""
    valid_from_h: float
    """World time from which it is true (earlier than ``time_h`` for a late fact)."""
    importance: int
    """The agent's 1-10 rating at write time (as an LLM would rate poignancy); knows nothing of the future."""
    entity: int = -1
    key: int = -1
    value: str = ""
    signature: int = -1
    version: int = -1
    topic: int = -1
    template: int = 0
    form: str = ""
    """For a keyed memory: "keyed", "text_entity" or "text_named" (see ``FORMS``); empty for the others."""


@dataclass(frozen=True, slots=True)
class Execution:
    """The agent performs a task: it retrieves strategies, uses one, and learns the outcome."""

    at: int
    """Memories written before it."""
    time_h: float
    signature: int
    query: str
    u_explore: float
    """Uniform draw: below the exploration rate, the agent tries another retrieved strategy."""
    u_pick: float
    """Uniform draw choosing which other strategy."""
    u_outcome: float
    """Uniform draw: success when below the used strategy's true success rate."""


@dataclass(frozen=True, slots=True)
class Query:
    """A question with a known answer at its moment."""

    at: int
    time_h: float
    text: str
    kind: str
    """"fact" or "strategy"."""
    key: int = -1
    signature: int = -1
    template: int = 0


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A moment at which queries are asked (after ``at`` memories were written)."""

    at: int
    time_h: float
    queries: tuple[Query, ...]


@dataclass(frozen=True)
class WorldShape:
    """How big the world is for a given number of memories; every field is derived from ``n_memories``.

    The life gets longer as memory grows (more entities, more changes per fact,
    more strategy versions), as it does for an agent that runs longer.
    """

    n_memories: int
    n_entities: int
    n_signatures: int
    span_h: float
    """World-time length of the life, hours."""
    fact_share: float = 0.12
    """Share of memories that state a keyed fact (changes, restatements, late facts)."""
    restatement_share: float = 0.2
    """Of the keyed memories: restatements of the current value."""
    late_share: float = 0.05
    """Of the keyed memories: values learnt late."""
    mention_share: float = 0.25
    """Of the irrelevant memories: remarks that name an entity."""
    task_log_probability: float = 0.3
    """Chance that a task execution leaves a log memory."""
    max_versions: int = 4
    executions_per_version: tuple[int, int] = (10, 26)
    """Executions between two strategy versions (and after the last), uniform in [low, high)."""
    exploration: float = 0.2
    """Chance that the agent tries a retrieved strategy other than the first."""
    unguided_success: float = 0.1
    """Success rate of a task performed without any retrieved strategy for it."""
    topic_window: int = 6
    """Topics active at once; the window slides over the life (topic drift)."""

    @staticmethod
    def for_size(n_memories: int) -> WorldShape:
        """The shape of a life of ``n_memories`` memories (at least 100)."""
        if n_memories < 100:
            raise ValueError(f"n_memories is {n_memories}; pass at least 100")
        scale = n_memories / 1000.0
        return WorldShape(
            n_memories=n_memories,
            n_entities=max(6, round(15 * scale**0.6)),
            n_signatures=max(3, round(4 * scale**0.3)),
            span_h=24.0 * 30.0 * math.sqrt(scale),
        )


@dataclass
class World:
    """A generated life with its ground truth (see the module docstring)."""

    seed: int
    shape: WorldShape
    domain: str
    phrasing: str = "tuning"
    """The phrasing half: "tuning", "heldout" or "validation" (see the module docstring)."""
    text_share: float = 0.0
    """Share of keyed memories written as text only (forms "text_entity" and "text_named")."""
    entities: list[Entity] = field(default_factory=list, repr=False)
    keys: list[FactKey] = field(default_factory=list, repr=False)
    signatures: list[Signature] = field(default_factory=list, repr=False)
    memories: list[MemoryRecord] = field(default_factory=list, repr=False)
    executions: list[Execution] = field(default_factory=list, repr=False)
    checkpoints: list[Checkpoint] = field(default_factory=list, repr=False)
    topics: tuple[str, ...] = ()
    _key_versions: list[list[int]] = field(default_factory=list, repr=False)
    """Per key: indices of its keyed memories in write order."""
    _key_best: list[list[int]] = field(default_factory=list, repr=False)
    """Per key: for each prefix of _key_versions, the index of the version that is current."""
    _signature_versions: list[list[int]] = field(default_factory=list, repr=False)
    """Per signature: indices of its strategy memories in write order (= version order)."""

    # -- ground truth --------------------------------------------------------------------------------------

    def current_index(self, key: int, at: int) -> int:
        """Index of the memory whose value is current for ``key`` after ``at`` memories; -1 when none yet."""
        versions = self._key_versions[key]
        position = bisect.bisect_left(versions, at)
        return -1 if position == 0 else self._key_best[key][position - 1]

    def current_value(self, key: int, at: int) -> str | None:
        """The value of ``key`` after ``at`` memories were written (latest valid_from wins); None when unknown."""
        index = self.current_index(key, at)
        return None if index < 0 else self.memories[index].value

    def best_version(self, signature: int, at: int) -> int:
        """The newest (best) strategy version of ``signature`` written before ``at``; -1 when none."""
        return bisect.bisect_left(self._signature_versions[signature], at) - 1

    def key_versions(self, key: int) -> list[int]:
        """Indices of the keyed memories of ``key``, in write order."""
        return list(self._key_versions[key])

    def signature_versions(self, signature: int) -> list[int]:
        """Indices of the strategy memories of ``signature``, in version order."""
        return list(self._signature_versions[signature])

    def is_answer(self, index: int, query: Query) -> bool:
        """Whether memory ``index`` holds the currently true answer to ``query``."""
        if index < 0 or index >= query.at:
            return False
        memory = self.memories[index]
        if query.kind == "fact":
            return memory.key == query.key and memory.value == self.current_value(query.key, query.at)
        return memory.signature == query.signature and memory.version == self.best_version(query.signature, query.at)

    def answers(self, query: Query) -> list[int]:
        """Every memory that holds the currently true answer to ``query``."""
        if query.kind == "fact":
            return [i for i in self._key_versions[query.key] if i < query.at and self.is_answer(i, query)]
        best = self.best_version(query.signature, query.at)
        return [self._signature_versions[query.signature][best]] if best >= 0 else []

    def is_outdated(self, index: int, at: int) -> bool:
        """Whether memory ``index`` states something no longer true after ``at`` memories were written.

        A keyed fact is outdated when its value is not its key's current value;
        a strategy when a newer (better) version of its signature exists.
        """
        memory = self.memories[index]
        if memory.category in KEYED:
            return memory.value != self.current_value(memory.key, at)
        if memory.category == Category.STRATEGY:
            return memory.version < self.best_version(memory.signature, at)
        return False

    def time_of(self, hours: float) -> datetime:
        """World time as a datetime."""
        return WORLD_START + timedelta(hours=hours)

    def category_counts(self) -> dict[str, int]:
        """How many memories of each category."""
        counts = {c.name.lower(): 0 for c in Category}
        for memory in self.memories:
            counts[memory.category.name.lower()] += 1
        return counts

    def form_counts(self) -> dict[str, int]:
        """How many keyed memories of each form."""
        counts = dict.fromkeys(FORMS, 0)
        for memory in self.memories:
            if memory.category in KEYED:
                counts[memory.form] += 1
        return counts

    @property
    def words(self) -> Phrasing:
        """The templates and name pools of this world's phrasing half."""
        return phrasing_for(self.phrasing)


# ---- generation ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Planned:
    """A structured event before it has a turn: a keyed fact, a strategy version or a task execution."""

    x: float
    """Fraction of the life when it happens."""
    order: int
    """Tie-breaker that keeps generation order stable."""
    what: str
    """"fact", "restate", "late", "strategy", "execution"."""
    key: int = -1
    signature: int = -1
    version: int = -1
    logs: bool = False


def _capitalise(text: str) -> str:
    """Upper-case the first letter, unless the text starts with an identifier such as ``billing-api``."""
    first = text.split(" ", 1)[0]
    if not text or "-" in first or ":" in first:
        return text
    return text[:1].upper() + text[1:]


def _importance(rng: random.Random, low: int, high: int) -> int:
    return max(1, min(10, rng.randint(low, high)))


def _make_entities(rng: random.Random, shape: WorldShape, phrasing: Phrasing) -> list[Entity]:
    n = shape.n_entities
    n_users = max(2, round(n * 0.4))
    n_services = max(2, round(n * 0.35))
    n_projects = max(2, n - n_users - n_services)
    entities: list[Entity] = []

    def timing() -> tuple[float, float]:
        intro = 0.0 if rng.random() < 0.3 else rng.uniform(0.0, 0.85)
        until = 1.0 if rng.random() < 0.6 else intro + rng.uniform(0.2, 0.7) * (1.0 - intro)
        return intro, until

    people: list[tuple[str, str]] = []
    used_people: set[tuple[str, str]] = set()
    while len(people) < n_users:
        person = (rng.choice(phrasing.first_names), rng.choice(phrasing.last_names))
        if person not in used_people:
            used_people.add(person)
            people.append(person)
    first_counts: dict[str, int] = {}
    for first, _ in people:
        first_counts[first] = first_counts.get(first, 0) + 1
    for first, last in people:
        slug = f"{first}-{last}".lower()
        aliases: tuple[str, ...] = (f"{first} {last}", first) if first_counts[first] == 1 else (f"{first} {last}",)
        intro, until = timing()
        entities.append(Entity(len(entities), "user", f"user:{slug}", f"{first} {last}", slug, aliases, intro, until))

    combos = [(d, r) for d in phrasing.service_domains for r in SERVICE_ROLES]
    rng.shuffle(combos)
    for domain, (role, role_text) in combos[:n_services]:
        slug = f"{domain}-{role}"
        words = domain.replace("-", " ")
        aliases = (f"the {words} {role_text}", slug, f"the {slug} service")
        intro, until = timing()
        entities.append(
            Entity(len(entities), "service", f"service:{slug}", f"{words} {role_text}", slug, aliases, intro, until)
        )

    names = [c + s for s in CODENAME_SUFFIXES for c in phrasing.codenames]
    firsts = names[: len(phrasing.codenames)]
    rng.shuffle(firsts)
    names = firsts + names[len(phrasing.codenames) :]
    for name in names[:n_projects]:
        slug = name.lower().replace(" ", "-")
        aliases = (f"Project {name}", name, f"the {name} project")
        intro, until = timing()
        entities.append(
            Entity(len(entities), "project", f"project:{slug}", f"Project {name}", slug, aliases, intro, until)
        )
    return entities


def _make_keys(rng: random.Random, entities: Sequence[Entity], budget: int) -> list[FactKey]:
    """Three to five attributes per entity, fewer when the fact budget is small (each key needs a value)."""
    keys: list[FactKey] = []
    by_type = {t: [i for i, a in enumerate(ATTRIBUTES) if a.entity_type == t] for t in ("user", "service", "project")}
    target = max(1, min(4, budget // max(1, 2 * len(entities))))
    for entity in entities:
        choices = by_type[entity.type]
        count = min(len(choices), rng.randint(max(1, target - 1), target + 1))
        for attribute in sorted(rng.sample(choices, count)):
            keys.append(FactKey(len(keys), entity.index, attribute))
    return keys


def _make_signatures(
    rng: random.Random, shape: WorldShape, entities: Sequence[Entity]
) -> tuple[list[Signature], list[_Planned]]:
    signatures: list[Signature] = []
    planned: list[_Planned] = []
    pairs = [(t, e.index) for t, task in enumerate(TASK_TYPES) for e in entities if e.type == task.entity_type]
    rng.shuffle(pairs)
    scale = shape.n_memories / 1000.0
    mean_extra = 0.8 + 0.35 * math.log10(max(scale, 1.0))
    order = 0
    for task_index, entity_index in pairs[: shape.n_signatures]:
        task = TASK_TYPES[task_index]
        entity = entities[entity_index]
        versions = 1
        while versions < shape.max_versions and rng.random() < mean_extra / (1.0 + mean_extra):
            versions += 1
        versions = min(versions, len(task.approaches))
        rate = rng.uniform(0.15, 0.4)
        rates = [rate]
        for _ in range(versions - 1):
            rate = min(0.95, rate + rng.uniform(0.25, 0.35))
            rates.append(rate)
        approaches = tuple(rng.sample(range(len(task.approaches)), versions))
        index = len(signatures)
        signatures.append(
            Signature(index, f"{task.name}:{entity.slug}", task_index, entity_index, tuple(rates), approaches)
        )
        start = max(entity.intro, 0.0) + rng.uniform(0.0, 0.4) * (1.0 - entity.intro)
        times = sorted([start] + [rng.uniform(start, 0.95) for _ in range(versions - 1)])
        for version, x in enumerate(times):
            planned.append(_Planned(x, order, "strategy", signature=index, version=version))
            order += 1
            end = times[version + 1] if version + 1 < len(times) else 1.0
            low, high = shape.executions_per_version
            for _ in range(rng.randrange(low, high)):
                planned.append(
                    _Planned(
                        rng.uniform(x, end),
                        order,
                        "execution",
                        signature=index,
                        logs=rng.random() < shape.task_log_probability,
                    )
                )
                order += 1
    return signatures, planned


def _plan_facts(
    rng: random.Random, shape: WorldShape, entities: Sequence[Entity], keys: Sequence[FactKey], start_order: int
) -> list[_Planned]:
    budget = round(shape.fact_share * shape.n_memories)
    n_restate = round(budget * shape.restatement_share)
    n_late = round(budget * shape.late_share)
    n_changes = max(len(keys), budget - n_restate - n_late)
    planned: list[_Planned] = []
    order = start_order
    weights = []
    for key in keys:
        entity = entities[key.entity]
        weights.append(ATTRIBUTES[key.attribute].volatility * max(entity.until - entity.intro, 0.05))
    total = sum(weights)
    extra = n_changes - len(keys)
    counts = [0] * len(keys)
    if extra > 0:
        cumulative: list[float] = []
        running = 0.0
        for w in weights:
            running += w / total
            cumulative.append(running)
        for _ in range(extra):
            counts[min(bisect.bisect_left(cumulative, rng.random()), len(keys) - 1)] += 1
    for key, count in zip(keys, counts, strict=True):
        entity = entities[key.entity]
        planned.append(_Planned(entity.intro, order, "fact", key=key.index))
        order += 1
        for _ in range(count):
            planned.append(_Planned(rng.uniform(entity.intro, entity.until), order, "fact", key=key.index))
            order += 1
    for what, count in (("restate", n_restate), ("late", n_late)):
        for _ in range(count):
            key = keys[rng.randrange(len(keys))]
            entity = entities[key.entity]
            planned.append(_Planned(rng.uniform(entity.intro, 1.0), order, what, key=key.index))
            order += 1
    return planned


def _assign_turns(planned: Sequence[_Planned], n: int) -> list[int]:
    """A strictly increasing write slot per memory-producing event, as close as possible to x * n."""
    slots = [min(n - 1, int(p.x * n)) for p in planned]
    for i in range(1, len(slots)):
        slots[i] = max(slots[i], slots[i - 1] + 1)
    if slots and slots[-1] > n - 1:
        slots[-1] = n - 1
        for i in range(len(slots) - 2, -1, -1):
            slots[i] = min(slots[i], slots[i + 1] - 1)
    return slots


def _fill(template: str, rng: random.Random, extra: dict[str, str]) -> str:
    def slot(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in extra:
            return extra[name]
        if name in FILLERS:
            return rng.choice(FILLERS[name])
        if name == "n":
            return str(rng.randrange(2, 60))
        if name == "n2":
            return str(rng.randrange(2, 400))
        if name == "pct":
            return str(rng.randrange(1, 99))
        if name == "sec":
            return f"{rng.uniform(1, 300):.1f}"
        if name == "ms":
            return str(rng.randrange(3, 2500))
        raise KeyError(name)

    return _SLOT.sub(slot, template)


def _timestamp(world: World, hours: float) -> str:
    return world.time_of(hours).strftime("%Y-%m-%d %H:%M:%S")


def generate_world(
    n_memories: int,
    seed: int,
    *,
    n_checkpoints: int = 8,
    n_queries: int = 800,
    strategy_query_share: float = 0.15,
    phrasing: str = "tuning",
    text_share: float = 0.0,
) -> World:
    """Generate a life of exactly ``n_memories`` memories with its executions and checkpoints.

    ``n_queries`` are spread evenly over ``n_checkpoints`` moments (the last
    after the final memory); ``strategy_query_share`` of them ask how to do a
    task, the rest ask for a fact. ``phrasing`` picks the phrasing half
    ("tuning", "heldout" or "validation") and ``text_share`` the share of
    keyed memories written as text only (see the module docstring). Raises ValueError for
    fewer than 100 memories, no checkpoints or no queries, an unknown
    phrasing or a share outside [0, 1].
    """
    shape = WorldShape.for_size(n_memories)
    if n_checkpoints < 1 or n_queries < n_checkpoints:
        raise ValueError("pass n_checkpoints >= 1 and n_queries >= n_checkpoints")
    if not 0.0 <= text_share <= 1.0:
        raise ValueError(f"text_share is {text_share}; pass a share in [0, 1]")
    words = phrasing_for(phrasing)
    rng = random.Random(f"evolving-world:{seed}:{n_memories}")
    form_rng = random.Random(f"form:{seed}:{n_memories}")
    world = World(seed=seed, shape=shape, domain=rng.choice(DOMAINS), phrasing=phrasing, text_share=text_share)
    world.entities = _make_entities(rng, shape, words)
    world.keys = _make_keys(rng, world.entities, round(shape.fact_share * n_memories * 0.75))
    world.signatures, strategy_events = _make_signatures(rng, shape, world.entities)
    fact_events = _plan_facts(rng, shape, world.entities, world.keys, len(strategy_events))
    events = sorted(strategy_events + fact_events, key=lambda p: (p.x, p.order))
    # Executions produce a memory only when they leave a log; the others need no slot of their own.
    writes = [p for p in events if p.what != "execution" or p.logs]
    if len(writes) > n_memories * 0.5:
        raise ValueError(f"{n_memories} memories are too few for this world's structured events")
    slots = dict(zip((id(p) for p in writes), _assign_turns(writes, n_memories), strict=True))
    topics = list(NOISE_TOPICS)
    rng.shuffle(topics)
    world.topics = tuple(topics)

    # World time of each write: exponential gaps scaled to the life's span.
    gaps = [rng.expovariate(1.0) for _ in range(n_memories)]
    scale_h = shape.span_h / sum(gaps)
    times: list[float] = []
    clock = 0.0
    for gap in gaps:
        clock += gap * scale_h
        times.append(clock)

    by_slot: dict[int, _Planned] = {slots[id(p)]: p for p in writes}
    execution_at: list[tuple[int, _Planned]] = []
    for p in events:
        if p.what == "execution":
            at = slots[id(p)] if p.logs else min(n_memories, int(p.x * n_memories))
            execution_at.append((at, p))

    key_versions: list[list[int]] = [[] for _ in world.keys]
    key_best: list[list[int]] = [[] for _ in world.keys]
    signature_versions: list[list[int]] = [[] for _ in world.signatures]
    active_entities = sorted(range(len(world.entities)), key=lambda i: world.entities[i].intro)
    intro_fractions = [world.entities[i].intro for i in active_entities]
    services = [e for e in world.entities if e.type == "service"]
    projects = [e for e in world.entities if e.type == "project"]
    users = [e for e in world.entities if e.type == "user"]

    def current(key: int) -> MemoryRecord | None:
        best = key_best[key]
        return world.memories[best[-1]] if best else None

    for index in range(n_memories):
        now_h = times[index]
        x = index / n_memories
        planned = by_slot.get(index)
        if planned is None:
            world.memories.append(
                _noise(world, rng, index, now_h, x, active_entities, intro_fractions, services, projects, users)
            )
            continue
        if planned.what == "execution":
            signature = world.signatures[planned.signature]
            task = TASK_TYPES[signature.task]
            entity = world.entities[signature.entity]
            template = rng.randrange(len(TASK_LOG_TEMPLATES))
            ticket = f"{entity.slug.replace('-', '')[:3].upper()}-{rng.randrange(100, 9999)}"
            text = _capitalise(
                TASK_LOG_TEMPLATES[template].format(task=task.phrase.format(e=rng.choice(entity.aliases)), t=ticket)
            )
            world.memories.append(
                MemoryRecord(
                    index,
                    text,
                    Category.TASK_LOG,
                    "episode",
                    "agent",
                    now_h,
                    now_h,
                    _importance(rng, 3, 6),
                    entity=entity.index,
                    signature=signature.index,
                    template=template,
                )
            )
            continue
        if planned.what == "strategy":
            signature = world.signatures[planned.signature]
            task = TASK_TYPES[signature.task]
            entity = world.entities[signature.entity]
            template = rng.randrange(len(STRATEGY_TEMPLATES))
            approach = task.approaches[signature.approaches[planned.version]]
            text = _capitalise(
                STRATEGY_TEMPLATES[template].format(task=task.phrase.format(e=rng.choice(entity.aliases)), a=approach)
            )
            signature_versions[signature.index].append(index)
            world.memories.append(
                MemoryRecord(
                    index,
                    text,
                    Category.STRATEGY,
                    "strategy",
                    "reflection",
                    now_h,
                    now_h,
                    _importance(rng, 6, 9),
                    entity=entity.index,
                    signature=signature.index,
                    version=planned.version,
                    template=template,
                )
            )
            continue
        key = world.keys[planned.key]
        attribute = ATTRIBUTES[key.attribute]
        wording = words.wordings[key.attribute]
        entity = world.entities[key.entity]
        alias = rng.choice(entity.aliases)
        existing = current(key.index)
        form = _draw_form(form_rng, text_share)
        if planned.what == "restate" and existing is not None:
            value = existing.value
            template = rng.randrange(len(wording.restatements) + len(words.restate_wrappers))
            if template < len(wording.restatements):
                text = wording.restatements[template].format(e=alias, v=value)
            else:
                sentence = rng.choice(wording.statements).format(e=alias, v=value)
                text = words.restate_wrappers[template - len(wording.restatements)].format(s=sentence)
            record = MemoryRecord(
                index,
                _capitalise(text),
                Category.RESTATEMENT,
                attribute.kind,
                attribute.source,
                now_h,
                now_h,
                _importance(rng, 3, 7),
                entity=entity.index,
                key=key.index,
                value=value,
                template=100 + template,
                form=form,
            )
        elif planned.what == "late" and existing is not None and existing.valid_from_h > 1.0:
            first = world.memories[key_versions[key.index][0]].valid_from_h
            valid_from = rng.uniform(min(first, existing.valid_from_h - 1.0), existing.valid_from_h - 0.5)
            value = attribute.value(rng, existing.value, entity, world)
            day = world.time_of(valid_from)
            date = f"{MONTHS[day.month - 1]} {day.day}, {day.year}"
            template = rng.randrange(len(wording.late))
            text = wording.late[template].format(e=alias, v=value, d=date)
            record = MemoryRecord(
                index,
                _capitalise(text),
                Category.LATE_FACT,
                attribute.kind,
                attribute.source,
                now_h,
                valid_from,
                _importance(rng, 3, 7),
                entity=entity.index,
                key=key.index,
                value=value,
                template=200 + template,
                form=form,
            )
        else:
            value = attribute.value(rng, existing.value if existing is not None else None, entity, world)
            template = rng.randrange(len(wording.statements))
            text = wording.statements[template].format(e=alias, v=value)
            record = MemoryRecord(
                index,
                _capitalise(text),
                Category.FACT,
                attribute.kind,
                attribute.source,
                now_h,
                now_h,
                _importance(rng, 4, 8),
                entity=entity.index,
                key=key.index,
                value=value,
                template=template,
                form=form,
            )
        world.memories.append(record)
        key_versions[key.index].append(index)
        best = key_best[key.index]
        if not best or (record.valid_from_h, index) > (world.memories[best[-1]].valid_from_h, best[-1]):
            best.append(index)
        else:
            best.append(best[-1])

    world._key_versions = key_versions
    world._key_best = key_best
    world._signature_versions = signature_versions

    for at, p in sorted(execution_at, key=lambda item: (item[0], item[1].x, item[1].order)):
        signature = world.signatures[p.signature]
        if world.best_version(signature.index, at) < 0:
            continue  # its first strategy is written in the same turn: nothing to retrieve yet
        task = TASK_TYPES[signature.task]
        entity = world.entities[signature.entity]
        question = rng.choice(task.questions).format(e=rng.choice(entity.aliases))
        time_h = times[at - 1] if at > 0 else 0.0
        world.executions.append(
            Execution(at, time_h, signature.index, _capitalise(question), rng.random(), rng.random(), rng.random())
        )

    _make_checkpoints(world, rng, times, n_checkpoints, n_queries, strategy_query_share)
    return world


def _noise(
    world: World,
    rng: random.Random,
    index: int,
    now_h: float,
    x: float,
    active_entities: Sequence[int],
    intro_fractions: Sequence[float],
    services: Sequence[Entity],
    projects: Sequence[Entity],
    users: Sequence[Entity],
) -> MemoryRecord:
    """An irrelevant memory on the topics of the moment, sometimes naming a known entity."""
    shape = world.shape
    known = bisect.bisect_right(intro_fractions, x)
    if rng.random() < shape.mention_share and known > 0:
        entity = world.entities[active_entities[rng.randrange(known)]]
        mention = rng.choice(world.words.mentions_by_type[entity.type])
        extra = {
            "user": rng.choice(entity.aliases),
            "svc": rng.choice(entity.aliases),
            "svc_slug": entity.slug,
            "proj": rng.choice(entity.aliases),
            "ts": _timestamp(world, now_h),
        }
        text = _capitalise(_fill(mention, rng, extra))
        return MemoryRecord(
            index,
            text,
            Category.MENTION,
            "episode",
            "agent",
            now_h,
            now_h,
            _importance(rng, 1, 4),
            entity=entity.index,
            template=world.words.mention_templates.index(mention),
        )
    topics = world.topics
    window = min(shape.topic_window, len(topics))
    if rng.random() < 0.2:
        topic = rng.randrange(len(topics))
    else:
        topic = int(x * (len(topics) - window + 1)) + rng.randrange(window)
    templates = NOISE_TOPICS[topics[topic]]
    template = rng.randrange(len(templates))
    text = _capitalise(_fill(templates[template], rng, {"ts": _timestamp(world, now_h)}))
    return MemoryRecord(
        index,
        text,
        Category.NOISE,
        "episode",
        "agent",
        now_h,
        now_h,
        _importance(rng, 1, 3),
        topic=topic,
        template=template,
    )


def _make_checkpoints(
    world: World, rng: random.Random, times: Sequence[float], n_checkpoints: int, n_queries: int, strategy_share: float
) -> None:
    n = world.shape.n_memories
    per_checkpoint = [
        n_queries // n_checkpoints + (1 if c < n_queries % n_checkpoints else 0) for c in range(n_checkpoints)
    ]
    for c in range(n_checkpoints):
        at = round(n * (c + 1) / n_checkpoints)
        time_h = times[at - 1]
        known_keys = [k.index for k in world.keys if world.current_index(k.index, at) >= 0]
        known_signatures = [s.index for s in world.signatures if world.best_version(s.index, at) >= 0]
        queries: list[Query] = []
        for _ in range(per_checkpoint[c]):
            if known_signatures and (rng.random() < strategy_share or not known_keys):
                signature = world.signatures[rng.choice(known_signatures)]
                task = TASK_TYPES[signature.task]
                entity = world.entities[signature.entity]
                template = rng.randrange(len(task.questions))
                text = task.questions[template].format(e=rng.choice(entity.aliases))
                queries.append(
                    Query(at, time_h, _capitalise(text), "strategy", signature=signature.index, template=template)
                )
            elif known_keys:
                key = world.keys[rng.choice(known_keys)]
                questions = world.words.wordings[key.attribute].questions
                entity = world.entities[key.entity]
                template = rng.randrange(len(questions))
                text = questions[template].format(e=rng.choice(entity.aliases))
                queries.append(Query(at, time_h, _capitalise(text), "fact", key=key.index, template=template))
        world.checkpoints.append(Checkpoint(at, time_h, tuple(queries)))


# ---- synthetic vectors ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SyntheticWeights:
    """Weights of the components of synthetic vectors (before the final normalisation).

    Every vector is a weighted sum of unit components — its entity, attribute,
    value, wording, topic, task type, signature, approach — plus *semantic
    noise*: a random unit vector inside a shared ``rank``-dimensional subspace,
    so that any two texts have a random affinity (as real sentences share
    words and themes by chance), plus a small isotropic part. Then a common
    direction (real embedding spaces are anisotropic) and normalisation.

    The defaults were fitted with ``evolving_world.py --fit-synthetic``
    (coordinate descent; seed 7): every field on the world of 10,000
    memories, then the size-dependent ones (``NOISE_FIELDS``) on the worlds
    of 10,000 and 100,000 together, so that the chance that the best memory
    of each group outranks the answer under plain cosine — and the mean and
    spread of that margin — match what the real all-MiniLM-L6-v2 embeddings
    of this generator's texts give. At 10k and 100k the fact groups agree
    within about 5 points (outdated versions, other facts of the entity, the
    attribute on other entities, remarks naming the entity, irrelevant
    memories; for tasks: older versions, task logs, facts of the entity);
    the irrelevant tail grows a little faster with size than the real one,
    so the synthetic 1M errs on the hard side. The benchmark prints both
    regimes side by side.
    """

    rank: int = 16
    common: float = 0.375
    isotropic: float = 0.076
    noise_spread: float = 0.288
    """Sigma of a log-normal factor on each vector's semantic noise: some texts are vaguer than others."""
    name_share: float = 1.536
    """Weight, relative to its own, of the component an entity shares with others of the same first name word.

    Real embeddings confuse "the billing API" with "the billing store", and Alice Moreau with Alice Silva.
    """
    fact_entity: float = 0.75
    fact_attribute: float = 0.352
    fact_value: float = 0.067
    fact_style: float = 0.049
    fact_noise: float = 0.55
    ask_entity: float = 0.562
    ask_attribute: float = 0.4
    ask_noise: float = 0.55
    strategy_task: float = 0.5
    strategy_signature: float = 0.216
    strategy_entity: float = 0.5
    strategy_approach: float = 0.48
    strategy_noise: float = 0.55
    log_task: float = 0.23
    log_signature: float = 0.102
    log_entity: float = 1.501
    log_noise: float = 0.24
    how_task: float = 0.6
    how_signature: float = 0.329
    how_entity: float = 0.6
    how_noise: float = 0.55
    mention_entity: float = 0.525
    mention_chatter: float = 0.3
    mention_noise: float = 0.6
    noise_topic: float = 0.402
    noise_noise: float = 0.323


@dataclass(frozen=True)
class _Components:
    """The random unit components of one world's synthetic vectors."""

    common: npt.NDArray[np.float64]
    basis: npt.NDArray[np.float64]
    entity: npt.NDArray[np.float64]
    attribute: npt.NDArray[np.float64]
    value: npt.NDArray[np.float64]
    style: npt.NDArray[np.float64]
    topic: npt.NDArray[np.float64]
    task: npt.NDArray[np.float64]
    signature: npt.NDArray[np.float64]
    approach: npt.NDArray[np.float64]


def _unit(matrix: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return np.asarray(matrix / np.maximum(norms, 1e-12), dtype=np.float64)


_APPROACH_SLOTS = 8
_STYLE_SLOTS = 512


def _components(world: World, dimension: int, rank: int, n_values: int, name_share: float) -> _Components:
    rng = np.random.default_rng([world.seed, world.shape.n_memories, 0x5EC7])

    def table(rows: int) -> npt.NDArray[np.float64]:
        return _unit(rng.standard_normal((max(rows, 1), dimension)))

    basis, _ = np.linalg.qr(rng.standard_normal((dimension, rank)))
    return _Components(
        common=_unit(rng.standard_normal(dimension)),
        basis=np.asarray(basis, dtype=np.float64),
        entity=_entity_components(world, table, name_share),
        attribute=table(len(ATTRIBUTES)),
        value=table(n_values),
        style=table(_STYLE_SLOTS),
        topic=table(len(world.topics) + 1),
        task=table(len(TASK_TYPES)),
        signature=table(len(world.signatures)),
        approach=table(len(TASK_TYPES) * _APPROACH_SLOTS),
    )


def _entity_components(
    world: World, table: Callable[[int], npt.NDArray[np.float64]], name_share: float
) -> npt.NDArray[np.float64]:
    """Entity components; entities whose names share the first word (a domain, a first name) lean together."""
    own = table(len(world.entities))
    words = sorted({_name_word(e) for e in world.entities})
    shared = table(len(words))
    position = {word: i for i, word in enumerate(words)}
    rows = np.asarray([position[_name_word(e)] for e in world.entities], dtype=np.int64)
    return _unit(own + name_share * shared[rows])


def _name_word(entity: Entity) -> str:
    """The first word of an entity's name: a service's domain, a user's first name, a project's codename."""
    return entity.slug.split("-", 1)[0]


def _finish(
    rng: np.random.Generator,
    c: _Components,
    structure: npt.NDArray[np.float64],
    noise_weight: npt.NDArray[np.float64],
    w: SyntheticWeights,
) -> FloatMatrix:
    """Add semantic and isotropic noise and the common direction to ``structure`` rows; unit float32 rows."""
    rows, dimension = structure.shape
    semantic = _unit(rng.standard_normal((rows, c.basis.shape[1])) @ c.basis.T)
    spread = np.exp(w.noise_spread * rng.standard_normal(rows))
    isotropic = _unit(rng.standard_normal((rows, dimension)))
    total = structure + (noise_weight * spread)[:, None] * semantic + w.isotropic * isotropic
    total = _unit(total) + w.common * c.common
    return np.asarray(_unit(total), dtype=np.float32)


def synthetic_vectors(
    world: World, dimension: int = 384, weights: SyntheticWeights | None = None
) -> tuple[FloatMatrix, FloatMatrix, FloatMatrix]:
    """Unit vectors with the world's structure: (memories, checkpoint questions in order, executions).

    Deterministic in the world's seed and size. Versions of one fact share the
    entity and attribute components and differ in value, wording and noise; a
    fact question shares entity and attribute and nothing else, so it cannot
    tell the current version from an outdated one; strategies and task logs
    share the task type, signature and entity; irrelevant memories sit on
    their (drifting) topic, remarks naming an entity carry part of it. The
    same text always gets the same vector.
    """
    w = weights or SyntheticWeights()
    value_ids: dict[tuple[int, str], int] = {}
    for memory in world.memories:
        if memory.key >= 0:
            value_ids.setdefault((world.keys[memory.key].attribute, memory.value), len(value_ids))
    c = _components(world, dimension, w.rank, len(value_ids), w.name_share)
    rng = np.random.default_rng([world.seed, world.shape.n_memories, 0xB10C])
    n = len(world.memories)
    out = np.empty((n, dimension), dtype=np.float32)
    chunk = 32_768
    for start in range(0, n, chunk):
        block = world.memories[start : start + chunk]
        structure = np.zeros((len(block), dimension), dtype=np.float64)
        noise = np.empty(len(block), dtype=np.float64)
        for row, memory in enumerate(block):
            structure[row], noise[row] = _memory_structure(world, memory, c, w, value_ids)
        out[start : start + len(block)] = _finish(rng, c, structure, noise, w)
    _same_text_same_vector([m.text for m in world.memories], out)

    question_rng = np.random.default_rng([world.seed, world.shape.n_memories, 0x9E7])
    questions = [q for checkpoint in world.checkpoints for q in checkpoint.queries]
    structure = np.zeros((len(questions), dimension), dtype=np.float64)
    noise = np.empty(len(questions), dtype=np.float64)
    for row, query in enumerate(questions):
        structure[row], noise[row] = _question_structure(world, query.kind, query.key, query.signature, c, w)
    question_out = _finish(question_rng, c, structure, noise, w)
    structure = np.zeros((len(world.executions), dimension), dtype=np.float64)
    noise = np.empty(len(world.executions), dtype=np.float64)
    for row, execution in enumerate(world.executions):
        structure[row], noise[row] = _question_structure(world, "strategy", -1, execution.signature, c, w)
    execution_out = _finish(question_rng, c, structure, noise, w)
    both = np.concatenate([execution_out, question_out])
    _same_text_same_vector([e.query for e in world.executions] + [q.text for q in questions], both)
    return out, both[len(world.executions) :], both[: len(world.executions)]


def _same_text_same_vector(texts: Sequence[str], vectors: FloatMatrix) -> None:
    """Give every repeated text the vector of its first occurrence, as a real embedder would."""
    first: dict[str, int] = {}
    for row, text in enumerate(texts):
        earlier = first.setdefault(text, row)
        if earlier != row:
            vectors[row] = vectors[earlier]


def _memory_structure(
    world: World, memory: MemoryRecord, c: _Components, w: SyntheticWeights, value_ids: dict[tuple[int, str], int]
) -> tuple[npt.NDArray[np.float64], float]:
    category = memory.category
    if category in KEYED:
        key = world.keys[memory.key]
        style = (key.attribute * 7 + memory.template) % _STYLE_SLOTS
        vector = (
            w.fact_entity * c.entity[key.entity]
            + w.fact_attribute * c.attribute[key.attribute]
            + w.fact_value * c.value[value_ids[(key.attribute, memory.value)]]
            + w.fact_style * c.style[style]
        )
        return vector, w.fact_noise
    if category in (Category.STRATEGY, Category.TASK_LOG):
        signature = world.signatures[memory.signature]
        if category == Category.TASK_LOG:
            vector = (
                w.log_task * c.task[signature.task]
                + w.log_signature * c.signature[signature.index]
                + w.log_entity * c.entity[signature.entity]
            )
            return vector, w.log_noise
        approach = signature.task * _APPROACH_SLOTS + signature.approaches[memory.version]
        vector = (
            w.strategy_task * c.task[signature.task]
            + w.strategy_signature * c.signature[signature.index]
            + w.strategy_entity * c.entity[signature.entity]
            + w.strategy_approach * c.approach[approach]
        )
        return vector, w.strategy_noise
    if category == Category.MENTION:
        return w.mention_entity * c.entity[memory.entity] + w.mention_chatter * c.topic[-1], w.mention_noise
    return w.noise_topic * c.topic[memory.topic], w.noise_noise


def _question_structure(
    world: World, kind: str, key: int, signature: int, c: _Components, w: SyntheticWeights
) -> tuple[npt.NDArray[np.float64], float]:
    if kind == "fact":
        fact = world.keys[key]
        return w.ask_entity * c.entity[fact.entity] + w.ask_attribute * c.attribute[fact.attribute], w.ask_noise
    sig = world.signatures[signature]
    vector = (
        w.how_task * c.task[sig.task] + w.how_signature * c.signature[sig.index] + w.how_entity * c.entity[sig.entity]
    )
    return vector, w.how_noise
