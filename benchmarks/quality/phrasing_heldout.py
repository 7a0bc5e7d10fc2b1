"""Held-out phrasing for the evolving world: statements, restatements, late facts, questions, names and mentions.

This file was written independently of ``sidecar/`` (nobody writing it read the
retrieval or perception code) and of world.py's own templates, from how agents'
notes, users in chat, tool and config output, tickets and changelogs actually
phrase things. It exists for evaluation only: the system is tuned on world.py's
phrasing and measured on this one. Never tune anything on it — no thresholds, no
keyword lists, no prompts, no fitted weights — or the held-out numbers mean
nothing.

Slots: attribute templates use ``{e}`` (the entity as written: "Alice Moreau",
"Alice", "the billing API", "billing-api", "the billing-api service",
"Project Falcon", "Falcon", "the Falcon project"), ``{v}`` (the value) and, in
late templates, ``{d}`` (the date since which the value had held). Questions use
``{e}`` only. Mention templates use the slots of world.py's ``MENTION_TEMPLATES``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AttributePhrasing:
    """How one attribute is said and asked, in the held-out wording."""

    statements: tuple[str, ...]
    """A new value is stated; ``{e}``, ``{v}``."""
    restatements: tuple[str, ...]
    """The current value is said again or confirmed; ``{e}``, ``{v}``."""
    late: tuple[str, ...]
    """Learnt late: the value had held since ``{d}``; ``{e}``, ``{v}``, ``{d}``."""
    questions: tuple[str, ...]
    """Asks for the attribute's current value; ``{e}`` only."""


HELDOUT_PHRASING: dict[str, AttributePhrasing] = {
    # -- services ------------------------------------------------------------------------------------------------
    "port": AttributePhrasing(
        statements=(
            "Noted: {e} has been reconfigured to accept connections on TCP port {v}.",
            "config diff for {e}: listen_port -> {v}",
            "netstat on the host shows {e} bound to 0.0.0.0:{v} after the redeploy.",
            "Changelog: the port for {e} is {v} from this release on; update your firewall rules.",
            "If you're hitting {e} directly, use port {v} — the old one is closed.",
            "Port {v} is where {e} is exposed after this morning's change.",
            "{e}: port changed to {v} (see deploy notes).",
            "Platform told me that as part of the ingress cleanup they moved {e} over to port {v}.",
        ),
        restatements=(
            "Re-checked the port for {e} — still {v}, nothing changed.",
            "{e} keeps answering on port {v} as before; the port is unchanged.",
            "Health probe confirms {e} is still up on port {v}.",
            "Yes, it's still port {v} for {e}.",
        ),
        late=(
            "Only found out today: {e} has actually been on port {v} ever since {d}.",
            "Digging through old deploy manifests, I see {e} switched to port {v} on {d} and has stayed there.",
            "Belated note: port {v} has been the port of {e} since {d}; nobody updated the wiki.",
        ),
        questions=(
            "What port do I use to connect to {e}?",
            "I'm writing a firewall rule for {e} — which port should I open?",
            "Remind me of the port number {e} is exposed on.",
            "{e} — what's its port these days?",
            "Do you know which TCP port {e} serves traffic on at the moment?",
        ),
    ),
    "endpoint": AttributePhrasing(
        statements=(
            "New base URL for {e}: {v}",
            "Noted: {e} is now served from {v}; the old hostname is being retired.",
            "service-registry: {e} -> {v}",
            "Point your client at {v} if you need {e}; that's its endpoint since the migration.",
            "Changelog: endpoint of {e} updated to {v}.",
            "Per the platform channel, the URL to hit for {e} is {v} now.",
            "{v} — that's where {e} lives after today's cutover.",
        ),
        restatements=(
            "{e} still answers at {v}; the endpoint hasn't moved.",
            "Confirmed with curl: {v} is still the right URL for {e}.",
            "Endpoint check for {e}: unchanged, still {v}.",
        ),
        late=(
            "Just realised {e} has been served from {v} since {d}; my notes were stale.",
            "The DNS history shows {e} has lived at {v} from {d} onward, which I only learned now.",
        ),
        questions=(
            "What URL should my client use for {e}?",
            "Can you give me the current endpoint of {e}?",
            "I need to update the env file — where does {e} live now, URL-wise?",
            "Which address do requests to {e} go to?",
            "What's the base URL for calling {e} today?",
        ),
    ),
    "version": AttributePhrasing(
        statements=(
            "Deployed {v} of {e} to prod this afternoon.",
            "{e} is now running {v} everywhere.",
            "release-bot: {e} {v} rolled out to 100% of hosts",
            "Heads up, {e} got bumped to {v}; read the changelog before upgrading clients.",
            "Changelog entry: {e} -> {v}.",
            "After the upgrade, {e} reports {v} on its /version page.",
            "The version live in prod for {e} is {v} since this morning's deploy.",
        ),
        restatements=(
            "{e} hasn't been upgraded; it's still on {v}.",
            "The /version page of {e} still returns {v}.",
            "Verified again: production is running {v} of {e}.",
        ),
        late=(
            "Only noticed now that {e} has actually been on {v} since {d}.",
            "Audit of the deploy history: {e} was upgraded to {v} on {d} and nothing newer went out; I had missed it.",
        ),
        questions=(
            "Which build of {e} is deployed right now?",
            "What version is {e} running at the moment?",
            "Before I file this bug against {e}, what version is live?",
            "Which release of {e} is live in prod today?",
            "{e}: current version?",
        ),
    ),
    "owner": AttributePhrasing(
        statements=(
            "Noted: the {v} team is now responsible for {e}.",
            "CODEOWNERS for {e} updated to the {v} team.",
            "Service catalog: {e} — owning team: {v}.",
            "Reorg fallout: {e} has been handed over to the {v} team.",
            "From this sprint, {e} belongs to the {v} team; route feature requests there.",
            "The {v} team has formally taken ownership of {e}.",
            "Ownership transfer done — {e} is a {v} team service now.",
        ),
        restatements=(
            "{e} remains with the {v} team; no ownership change in the reorg.",
            "Checked the catalog again — the {v} team is still listed as owner of {e}.",
            "Ownership of {e} unchanged: it stays with the {v} team.",
        ),
        late=(
            "I only learned today that the {v} team has owned {e} since {d}.",
            "Per an old reorg memo, {e} moved to the {v} team on {d} and has been theirs since; I'd missed it.",
        ),
        questions=(
            "Which team is {e} owned by right now?",
            "Who owns {e}? I need the team, not a person.",
            "I want to propose a change to {e} — which team should I talk to as its owner?",
            "What team is listed as the owner of {e}?",
            "{e} belongs to which team these days?",
        ),
    ),
    "region": AttributePhrasing(
        statements=(
            "Noted: {e} has been moved to region {v}.",
            "terraform plan for {e}: region -> {v}",
            "{v} is the region hosting {e} after the migration.",
            "We relocated {e} to {v} to sit closer to its main users.",
            "Deploy target for {e} changed: cloud region {v}.",
            "Infra ticket closed — {e} is live in the {v} region.",
        ),
        restatements=(
            "{e} hasn't left {v}; region unchanged.",
            "Console check: {e} is still deployed in {v}.",
            "Region for {e} remains {v}.",
        ),
        late=(
            "Late discovery: {e} has been hosted in the {v} region since {d}.",
            "Looking at the cloud cost export, {e} has been running in {v} from {d} on; I never recorded it.",
        ),
        questions=(
            "Which cloud region hosts {e} right now?",
            "Where is {e} deployed — which region?",
            "I'm checking data residency: what region is {e} in?",
            "What region should I look at in the console for {e}?",
        ),
    ),
    "database": AttributePhrasing(
        statements=(
            "{e} has switched its storage over to {v}.",
            "Noted: {e} now persists everything in {v}.",
            "Migration complete — {e} reads and writes {v} from today.",
            "db: {e} -> {v}",
            "The primary database for {e} is {v} now; the old cluster is read-only.",
            "{v} is what backs {e} after the cutover.",
        ),
        restatements=(
            "No DB change for {e}; it's still backed by {v}.",
            "Verified the connection string: {e} still talks to {v}.",
            "{e}'s database remains {v}.",
        ),
        late=(
            "I only found out now that {e} has been running on {v} since {d}.",
            "The migration ticket shows {e} moved its data to {v} on {d} and has stayed there; I never noted it.",
        ),
        questions=(
            "What database is behind {e}?",
            "Which DB engine does {e} use right now?",
            "I need to write a query against the storage of {e} — what database is it?",
            "Where does {e} keep its data, which database?",
        ),
    ),
    "oncall": AttributePhrasing(
        statements=(
            "PagerDuty: {v} is now the on-call for {e}.",
            "Rotation changed — pages for {e} go to {v} this week.",
            "If {e} alerts tonight, {v} is the one on call.",
            "Noted: current on-call engineer for {e} is {v}.",
            "{v} picked up the pager for {e} today.",
            "Handover done: {v} holds the on-call pager for {e} now.",
        ),
        restatements=(
            "{v} is still holding the pager for {e}.",
            "On-call for {e} unchanged: still {v}.",
            "Checked the rota again; on-call for {e} is still covered by {v}.",
        ),
        late=(
            "Only saw it now: {v} has been on call for {e} since {d}.",
            "The PagerDuty history says {v} took the on-call for {e} on {d} and still has it.",
        ),
        questions=(
            "Who's on call for {e} right now?",
            "I need to ping whoever is on call for {e} — who is it?",
            "If {e} starts failing tonight, who gets paged?",
            "Who holds the pager for {e} this week?",
            "Which engineer is currently covering on-call for {e}?",
        ),
    ),
    "rate_limit": AttributePhrasing(
        statements=(
            "Noted: {e} now throttles clients at {v}.",
            "ratelimit config for {e}: max = {v}",
            "{e} will start rejecting callers above {v}.",
            "Throttle for {e} set to {v} after the incident.",
            "Changelog: rate limit on {e} is {v} per API key.",
            "Clients of {e} get {v} at most before 429s kick in.",
            "{v} is the new cap for {e}; anything above that gets a 429.",
        ),
        restatements=(
            "{e} is still capped at {v}.",
            "Rate limit for {e} unchanged at {v}.",
            "Confirmed with the gateway folks that {e} still allows {v}.",
        ),
        late=(
            "Turns out {e} has been throttled at {v} since {d}; I only just saw the config history.",
            "Late finding: the cap on {e} was set to {v} on {d} and has not changed since.",
        ),
        questions=(
            "What's the current request cap on {e}?",
            "What throttle does {e} enforce on clients?",
            "I'm planning a bulk backfill against {e} — what's its rate limit?",
            "How many requests per second will {e} accept before throttling?",
            "What rate limit applies to {e} at the moment?",
        ),
    ),
    # -- users ---------------------------------------------------------------------------------------------------
    "meeting_preference": AttributePhrasing(
        statements=(
            "{e}'s meeting rule from now on: {v}.",
            "Meeting pref for {e}: {v}.",
            "{e} in chat: 'heads up, for meetings I'd like {v} from now on.'",
            "Scheduling note — {e} now wants {v} when it comes to meetings.",
            "When booking anything with {e}, remember their meeting preference: {v}.",
            "{v} — that's how {e} wants meetings set up from now on.",
            "Calendar assistant note: {e} updated their meeting preference to {v}.",
        ),
        restatements=(
            "{e} repeated it in today's 1:1: {v} for meetings still applies.",
            "Meeting preference for {e} hasn't changed — still {v}.",
            "{e} confirmed that for meetings it's still {v}.",
        ),
        late=(
            "{e} only mentioned today that their meeting preference has been {v} ever since {d}.",
            "Learnt belatedly: since {d}, {e}'s standing meeting preference has been {v}.",
        ),
        questions=(
            "How does {e} like their meetings?",
            "I'm about to send {e} an invite — any meeting preference I should know about?",
            "What kind of meetings does {e} prefer these days?",
            "When I schedule something with {e}, what meeting setup do they want?",
            "What's {e}'s meeting preference right now?",
        ),
    ),
    "language": AttributePhrasing(
        statements=(
            "{e} told me: 'I'm doing all my coding in {v} now.'",
            "{e} says {v} is their go-to programming language these days.",
            "Noted: write code samples for {e} in {v}.",
            "{e} in chat: 'please give me {v} examples from now on.'",
            "Preferred programming language for {e}: {v}.",
            "{e} has moved their day-to-day coding over to {v}.",
            "{v} is the language {e} wants to program in going forward.",
        ),
        restatements=(
            "{e} is still most comfortable coding in {v}.",
            "Asked {e} again — {v} remains their programming language of choice.",
            "{e}'s preferred language is unchanged: {v}.",
        ),
        late=(
            "{e} mentioned in passing that they've been coding mainly in {v} since {d}.",
            "Belated update: {e} has preferred {v} as their programming language since {d}.",
        ),
        questions=(
            "What programming language does {e} like to work in?",
            "I'm writing a snippet for {e} — which language should it be in?",
            "Which language is {e}'s favourite for coding right now?",
            "In what language should code for {e} be written?",
            "{e}'s preferred programming language — what is it?",
        ),
    ),
    "editor": AttributePhrasing(
        statements=(
            "{e} told me: 'I've switched to {v} for all my editing.'",
            "Noted: {e} edits code in {v} now.",
            "{e} has ditched their old setup and is using {v} as their editor.",
            "Editor for {e}: {v}. Share config snippets for that one.",
            "{e} asked for setup tips for {v}, which is now their main editor.",
            "{v} is the editor {e} works in from now on.",
        ),
        restatements=(
            "{e} still writes code in {v}.",
            "{e} is sticking with {v} as their editor.",
            "Saw {e}'s screen share today — the editor is still {v}.",
        ),
        late=(
            "{e} let slip that they've been using {v} as their editor since {d}.",
            "Only found out now: {e} moved to {v} for editing back on {d} and has used it since.",
        ),
        questions=(
            "What editor is {e} using these days?",
            "I want to send {e} a config snippet — which editor do they use?",
            "Which IDE or editor does {e} work in?",
            "What does {e} write code in, editor-wise?",
        ),
    ),
    "contact": AttributePhrasing(
        statements=(
            "{e} told me: 'if you need me, {v} is the best way.'",
            "Noted: reach {e} through {v}.",
            "{e} wants to be reached through {v} from now on.",
            "Contact channel for {e}: {v}.",
            "To get hold of {e}, use {v} — they don't check anything else reliably.",
            "{e} in chat: 'please use {v} when you need me, I've muted the rest.'",
            "{v} is now the preferred way to contact {e}.",
        ),
        restatements=(
            "{e} still wants to be contacted through {v}.",
            "Contact preference for {e} unchanged: {v}.",
            "{e} confirmed again that {v} is how to reach them.",
        ),
        late=(
            "{e} only mentioned today that they have preferred {v} for contact since {d}.",
            "Turns out since {d} the right way to reach {e} has been {v}.",
        ),
        questions=(
            "How does {e} want to be contacted?",
            "I need an answer from {e} today — what's the best channel to reach them?",
            "What's the preferred contact method for {e}?",
            "Which channel should I use to reach {e}?",
        ),
    ),
    "location": AttributePhrasing(
        statements=(
            "{e} told me: 'I've moved, I'm living in {v} now.'",
            "Noted: {e}'s home base is {v}.",
            "HR directory: {e} — location {v}.",
            "{e} relocated and is working out of {v} from this month.",
            "Heads up that {e} now lives in {v}, so plan for that timezone.",
            "{v} is the city {e} is located in now, after the move.",
            "{e} announced in #general that they've settled in {v}.",
        ),
        restatements=(
            "{e} hasn't moved; still in {v}.",
            "Location for {e} unchanged: {v}.",
            "{e} confirmed they are still living in {v}.",
        ),
        late=(
            "I learned only today that {e} has been living in {v} since {d}.",
            "{e} mentioned they moved to {v} on {d} and have lived there since; I'd had the old city all along.",
        ),
        questions=(
            "Which city does {e} live in these days?",
            "Where is {e} located right now?",
            "I'm scheduling across time zones — what city is {e} in?",
            "Where does {e} work from?",
            "What's {e}'s current location?",
        ),
    ),
    "role": AttributePhrasing(
        statements=(
            "{e} told me: 'my title changed, I'm officially {v} now.'",
            "Noted: {e}'s job title is {v}.",
            "HR directory: {e} — title: {v}.",
            "Congrats to {e}, who starts in the {v} position on Monday.",
            "Org chart updated: {e} now holds the {v} role.",
            "{e} moved into the job of {v} this cycle.",
            "{v} is {e}'s title after the reorg.",
        ),
        restatements=(
            "{e} is still in the {v} role.",
            "Title check for {e}: unchanged, {v}.",
            "{e} confirmed their job is still {v}.",
        ),
        late=(
            "HR confirmed {e} has held the title {v} since {d}; I hadn't updated my notes.",
            "Only heard today that {e} has been working as {v} since {d}.",
        ),
        questions=(
            "What's {e}'s title these days?",
            "What role does {e} have on the team now?",
            "I'm writing an intro email — what is {e}'s job title?",
            "What position does {e} hold at the moment?",
        ),
    ),
    "goal": AttributePhrasing(
        statements=(
            "{e} told me: 'my main objective now is to {v}.'",
            "Noted: {e}'s top personal goal is to {v}.",
            "{e} set a new personal objective for the half: {v}.",
            "In our 1:1, {e} said that above everything else they want to {v}.",
            "Personal goal of {e} going forward: {v}.",
            "To {v} — that's what {e} wants to achieve this quarter.",
            "OKR draft from {e}, their own goal: {v}.",
        ),
        restatements=(
            "{e}'s goal hasn't changed: still to {v}.",
            "{e} reiterated that they're still aiming to {v}.",
            "Still top of {e}'s personal goals: {v}.",
        ),
        late=(
            "{e} told me today that since {d} their goal has been to {v}.",
            "Belatedly learnt that {e} has been working to {v} as their main goal since {d}.",
        ),
        questions=(
            "What is {e} trying to achieve at the moment?",
            "What's {e}'s main goal right now?",
            "Before my 1:1 with {e}, what personal goal are they focused on?",
            "What objective is {e} pursuing these days?",
        ),
    ),
    "diet": AttributePhrasing(
        statements=(
            "{e} told me: 'for catering, put me down as {v}.'",
            "Noted: {e}'s diet is {v}.",
            "Catering form for {e}: {v}.",
            "Dietary requirements update — {e}: {v}.",
            "{e} mentioned they've changed their diet; it's {v} now.",
            "{v} — remember that for {e} when booking the team dinner.",
        ),
        restatements=(
            "{e}'s dietary requirement is unchanged: {v}.",
            "Asked {e} before the offsite dinner — still {v}.",
            "The catering list still says {v} for {e}, and they confirmed it.",
        ),
        late=(
            "{e}'s diet has been {v} since {d}, they told me just now.",
            "Only found out today that {e}'s dietary requirement has been {v} ever since {d}.",
        ),
        questions=(
            "Does {e} have any dietary requirements I should know about?",
            "I'm ordering food for the offsite — what does {e} eat?",
            "What's {e}'s diet?",
            "Any food restrictions for {e} when I book the dinner?",
        ),
    ),
    "working_hours": AttributePhrasing(
        statements=(
            "{e} told me: 'my hours are {v} now, don't expect replies outside that.'",
            "Noted: {e}'s working hours are {v}.",
            "Calendar: working hours for {e} set to {v}.",
            "{e} changed their schedule and now works {v}.",
            "{e} is shifting their workday to {v} from next week.",
            "{v} — those are {e}'s working hours from now on.",
        ),
        restatements=(
            "{e}'s working hours are still {v}.",
            "{e} confirmed they're keeping the same working hours: {v}.",
            "No change to {e}'s working hours: {v}.",
        ),
        late=(
            "{e} said they've been working {v} since {d}; I had the old hours.",
            "Learnt only today: {e}'s working hours have been {v} since {d}.",
        ),
        questions=(
            "What hours does {e} work?",
            "When can I reach {e} during the day — what are their working hours?",
            "I want to schedule a call with {e}; what are their working hours now?",
            "During which hours is {e} working these days?",
        ),
    ),
    # -- projects ------------------------------------------------------------------------------------------------
    "deadline": AttributePhrasing(
        statements=(
            "Noted: {e} is due on {v}.",
            "Deadline for {e} is now {v}.",
            "Steering committee pushed the ship date of {e} to {v}.",
            "Per leadership, {e} has to be delivered by {v}.",
            "jira: due date of {e} -> {v}",
            "{v} is the new hard deadline for {e}; no more slips.",
            "We agreed today that {e} needs to be done by {v}.",
        ),
        restatements=(
            "Deadline for {e} unchanged: {v}.",
            "{e} still has to land by {v}.",
            "PM confirmed {v} is still the due date for {e}.",
        ),
        late=(
            "Only learned now that the deadline of {e} has been {v} since {d}.",
            "The planning doc shows that on {d}, the due date of {e} was moved to {v}, and it's held since.",
        ),
        questions=(
            "When does {e} have to be finished?",
            "What's the due date for {e}?",
            "I'm planning my leave — when is {e} due?",
            "What deadline is {e} working against right now?",
            "By what date must {e} be delivered?",
        ),
    ),
    "lead": AttributePhrasing(
        statements=(
            "Noted: {v} is now the project lead for {e}.",
            "{v} has taken over as lead of {e}.",
            "Org update: {e} is now run by {v}.",
            "{e} has a new lead — {v}. Send design questions their way.",
            "Project charter for {e}: lead = {v}.",
            "From this sprint on, {v} runs {e} day to day as its lead.",
        ),
        restatements=(
            "{v} is still running {e}.",
            "No leadership change on {e}; {v} remains lead.",
            "Checked the project page: {v} is still listed as lead of {e}.",
        ),
        late=(
            "Only heard today that {v} has been leading {e} since {d}.",
            "The org history shows {v} became lead of {e} on {d} and has been since, which I'd missed.",
        ),
        questions=(
            "Who's leading {e} these days?",
            "Who's the project lead on {e} now?",
            "I have a scope question about {e} — who runs the project?",
            "Which person is in charge of {e} at the moment?",
        ),
    ),
    "milestone": AttributePhrasing(
        statements=(
            "Noted: the next milestone for {e} is {v}.",
            "Roadmap update: {e} is now targeting {v} as its milestone.",
            "{e} has shifted focus to its next milestone, {v}.",
            "Milestone set for {e}: {v}.",
            "{v} is the milestone {e} is working towards now.",
            "Planning outcome: the milestone everything on {e} points at is now {v}.",
        ),
        restatements=(
            "{e}'s milestone is still {v}.",
            "Next milestone for {e} unchanged: {v}.",
            "Confirmed at planning: {e} is still heading for {v} as its milestone.",
        ),
        late=(
            "Only learned today that since {d} the milestone for {e} has been {v}.",
            "Per the roadmap history, {e} switched its milestone to {v} on {d} and has kept it since.",
        ),
        questions=(
            "What milestone is {e} working towards?",
            "What's the next milestone on {e}'s roadmap?",
            "I'm updating the roadmap slide — what milestone is {e} aiming at?",
            "Which milestone is {e} focused on now?",
        ),
    ),
    "status": AttributePhrasing(
        statements=(
            "Noted: {e} is currently {v}.",
            "Status update for {e}: {v}.",
            "Standup: {e} — {v}.",
            "RAG report: {e} moved to '{v}'.",
            "According to the PM, {e} is {v} right now.",
            "As of this week, the project status of {e} is {v}.",
            "{v} — that's where {e} stands after today's review.",
        ),
        restatements=(
            "{e} is still {v}; nothing changed since last week.",
            "Status of {e} unchanged: {v}.",
            "PM confirmed again that {e} is {v}.",
        ),
        late=(
            "Only found out now that {e} has been {v} since {d}.",
            "The status history shows {e} has been {v} from {d} onward; I had an older status.",
        ),
        questions=(
            "How's {e} going — what's its status?",
            "Where does {e} stand right now?",
            "I'm writing the weekly summary: what's the current status of {e}?",
            "What state is {e} in at the moment?",
        ),
    ),
    "budget": AttributePhrasing(
        statements=(
            "Noted: {e} has {v} to spend.",
            "Finance signed off on a {v} budget for {e}.",
            "Budget for {e} set to {v} for the year.",
            "{e}: budget revised to {v}.",
            "{v} is the total budget allocated to {e} now.",
            "After the cost review, {e} was given a budget of {v}.",
        ),
        restatements=(
            "{e}'s budget is still {v}.",
            "No change to the money for {e}: the budget is {v}.",
            "Finance confirmed the budget of {e} remains {v}.",
        ),
        late=(
            "Only learned today that {e} has had a budget of {v} since {d}.",
            "Digging through the finance sheet: the budget of {e} was set to {v} on {d} and hasn't moved since.",
        ),
        questions=(
            "How much budget does {e} have?",
            "What is the current budget of {e}?",
            "Before I order more hardware for {e}, what's its budget?",
            "What spending limit does {e} have right now?",
        ),
    ),
    "repository": AttributePhrasing(
        statements=(
            "Noted: {e}'s code is hosted at {v}.",
            "git remote for {e}: {v}",
            "{e} migrated its repo to {v}; the old one is archived.",
            "The source of {e} now lives in {v}.",
            "Repo for {e} is {v} — clone from there.",
            "{v} is the canonical repository for {e} from now on.",
        ),
        restatements=(
            "{e}'s repo is still {v}.",
            "No repo move for {e}; still {v}.",
            "Confirmed the remote: the code of {e} is still at {v}.",
        ),
        late=(
            "Only noticed now that the code of {e} has lived in {v} since {d}.",
            "The archive notice says {e} moved its code to {v} on {d}; it's been there since, I'd cloned the old one.",
        ),
        questions=(
            "Where's the code for {e}?",
            "What's the repo URL for {e}?",
            "I want to open a PR on {e} — which repository do I clone?",
            "Which git repository is {e} in now?",
        ),
    ),
    "tracker": AttributePhrasing(
        statements=(
            "Noted: issues for {e} are tracked in {v}.",
            "{e} moved its tickets over to {v}.",
            "Issue tracker for {e}: {v}.",
            "Bug reports about {e} go to {v} from now on.",
            "{v} is where all work on {e} is tracked now.",
            "PM switched {e} to {v} for planning and bugs.",
        ),
        restatements=(
            "{e} is still tracked in {v}.",
            "Tracker for {e} unchanged: {v}.",
            "Confirmed the tickets for {e} are still in {v}.",
        ),
        late=(
            "Only realised today that {e} has used {v} for its tickets since {d}.",
            "Turns out the work on {e} has been tracked in {v} since {d}.",
        ),
        questions=(
            "Where are {e}'s issues tracked?",
            "Which board should I put a ticket for {e} on?",
            "I found a bug in {e} — where do I report it?",
            "What issue tracker does {e} use these days?",
        ),
    ),
    "stakeholder": AttributePhrasing(
        statements=(
            "Noted: {v} is the main stakeholder for {e} now.",
            "{e} is now being built primarily for {v}.",
            "Key stakeholder on {e} changed to {v}.",
            "Project charter for {e}: stakeholder = {v}.",
            "{v} has become the customer that {e} is delivered for.",
            "Sales says {v} is now the primary customer behind {e}.",
        ),
        restatements=(
            "{e}'s key stakeholder remains {v}.",
            "Stakeholder for {e} unchanged: {v}.",
            "Confirmed in the review that {v} is still the main customer for {e}.",
        ),
        late=(
            "Only learned now that {v} has been the key stakeholder of {e} since {d}.",
            "The contract archive shows {v} became the main customer of {e} on {d} and has been ever since.",
        ),
        questions=(
            "Who's the main stakeholder of {e}?",
            "Which customer is {e} being built for now?",
            "I need to send a demo invite — who's the key stakeholder for {e}?",
            "For whom is {e} being delivered, stakeholder-wise?",
        ),
    ),
}

HELDOUT_FIRST_NAMES: tuple[str, ...] = (
    "Adaeze", "Bogdan", "Chiara", "Deepak", "Eunji", "Folake", "Giorgos", "Hamid", "Ingrid", "Jamal",
    "Kalani", "Liang", "Magnus", "Nasrin", "Obinna", "Paulina", "Ravi", "Soraya", "Thabo", "Urszula",
    "Vikram", "Wiremu", "Xavier", "Yuki", "Zainab", "Agnieszka", "Babajide", "Camila", "Dario", "Emilia",
    "Fernando", "Gulnara", "Haruto", "Ifeoma", "Jorge", "Katarzyna", "Lars", "Mariam", "Nikhil", "Oluwaseun",
    "Pablo", "Rashid", "Siobhan", "Tuan", "Ulrike", "Vusi", "Yerlan", "Zeynep", "Anouk", "Bilal",
    "Cosmin", "Dilnoza", "Eitan", "Fiona", "Hamza", "Ilse", "Juhani", "Kemal", "Lindiwe", "Mirela",
    "Naoki", "Orla", "Parisa", "Rohan", "Sione", "Tamar", "Aiyana", "Mthunzi", "Svetlana", "Thuy",
)  # fmt: skip
HELDOUT_LAST_NAMES: tuple[str, ...] = (
    "Adebayo", "Bergstrom", "Chaudhry", "Dimitriou", "Esposito", "Fonseca", "Gallagher", "Hoang", "Ishikawa",
    "Jovanovic", "Kaminski", "Lungu", "Mwangi", "Nkemelu", "Papadopoulos", "Quispe", "Rasmussen", "Sokolova",
    "Tran", "Ugwu", "Vasquez", "Wojcik", "Xu", "Yadav", "Zimmermann", "Abdullah", "Barros", "Castellanos",
    "Dlamini", "Engel", "Fujita", "Halvorsen", "Inoue", "Jaramillo", "Kovacs", "Lehmann", "Mahlangu",
    "Nieminen", "Okonkwo", "Pham", "Rinaldi", "Szabo", "Toivonen", "Ueda", "Valdez", "Whitfield", "Yoon",
    "Zapata", "Hosseini", "Murphy", "Sandoval", "Kuznetsov",
)  # fmt: skip
HELDOUT_SERVICE_DOMAINS: tuple[str, ...] = (
    "subscriptions", "entitlements", "consent", "kyc", "settlement", "reconciliation", "dispatch", "returns",
    "cart", "wishlist", "reviews", "telemetry", "alerting", "secrets", "certificates", "dns", "cdn", "upload",
    "transcoding", "playlist", "booking", "calendar", "reservations", "presence", "sitemap", "ads",
    "attribution", "experiment", "segmentation", "personalization", "ranking", "autocomplete", "spellcheck",
    "geocoding", "map-tiles", "currency", "fx-rates", "sanctions", "chargeback", "dunning", "payout",
    "credit-score", "avatar", "comments", "moderation", "leaderboard",
)  # fmt: skip
HELDOUT_CODENAMES: tuple[str, ...] = (
    "Andromeda", "Altair", "Antares", "Bellatrix", "Betelgeuse", "Calypso", "Callisto", "Capella", "Cassini",
    "Deneb", "Draco", "Elara", "Enceladus", "Europa", "Fenrir", "Ganymede", "Hyperion", "Icarus", "Janus",
    "Kepler", "Lynx", "Mimas", "Mistral", "Nautilus", "Nereid", "Oberon", "Perseus", "Phobos", "Pollux",
    "Procyon", "Rigel", "Sirius", "Sirocco", "Tethys", "Titania", "Triton", "Umbriel", "Wyvern", "Xanadu",
    "Ymir", "Achernar", "Chinook", "Dorado", "Eridanus", "Gryphon", "Hydra", "Ibis", "Jacaranda", "Kookaburra",
    "Lorikeet", "Manatee", "Narwhal", "Ocelot", "Pangolin", "Quokka", "Tamarind", "Vireo", "Wombat", "Zebu",
    "Sycamore", "Tamarack", "Magnolia", "Mangrove", "Baobab", "Edelweiss", "Ginkgo",
)  # fmt: skip

HELDOUT_MENTION_TEMPLATES: tuple[str, ...] = (
    # users
    "{user} spent {day} {hobby} and came back sunburnt.",
    "Lunch with {user}; we both had {food} and talked about the new coffee machine.",
    "{user} asked where the wiki page on editor plugins went after the migration.",
    "{user} showed everyone photos from a long weekend in {place}.",
    "Pair-debugged a flaky test with {user} for {n} minutes; it was a timezone bug in the fixture.",
    "{user} reacted with a party emoji to the release announcement.",
    "{user} wants to know who's bringing {food} to the potluck on {day}.",
    "{user} asked whether the meeting-room booking tool is down again.",
    "{user} asked what time the office closes on {day} because of the holiday.",
    # services
    "[{ts}] INFO {svc_slug}: config reload finished, no changes detected",
    "[{ts}] DEBUG {svc_slug}: request served in {ms} ms",
    "Someone in #help asked which port the local test mock of {svc} uses; pointed them to the README.",
    "{svc} got a mention in the architecture review as a good example of structured logging.",
    "{svc} threw {n} harmless deprecation warnings during the nightly batch.",
    "Wrote a short explainer on what {svc} does at a high level, for the new hires.",
    "Someone asked who to thank for the nice dashboards of {svc}; nobody remembered.",
    # projects
    "Stickers for {proj} arrived; {n} of them are already on laptops.",
    "Demoed a small corner of {proj} at the show-and-tell on {day}.",
    "The design crit for {proj} ran {n} minutes over.",
    "{proj} came up at lunch; people were curious how the name was picked.",
    "{proj} was mentioned in the budget meeting, but only as an example of good documentation.",
    "Someone asked in a thread about {proj} whether a roadmap doc exists; nobody linked one.",
    "Archived old screenshots related to {proj} from the shared drive.",
)


if __name__ == "__main__":
    import re
    import string

    from benchmarks.quality.world import (
        ATTRIBUTES,
        CODENAMES,
        FIRST_NAMES,
        LAST_NAMES,
        MENTION_TEMPLATES,
        SERVICE_DOMAINS,
        SERVICE_ROLES,
    )

    def fields(template: str) -> set[str]:
        return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}

    names = {a.name for a in ATTRIBUTES}
    assert set(HELDOUT_PHRASING) == names, set(HELDOUT_PHRASING) ^ names
    world_templates = set(MENTION_TEMPLATES)
    for attribute in ATTRIBUTES:
        world_templates.update((*attribute.statements, *attribute.restatements, *attribute.late, *attribute.questions))
    minimum = {"statements": 6, "restatements": 3, "late": 2, "questions": 4}
    slots = {"statements": {"e", "v"}, "restatements": {"e", "v"}, "late": {"e", "v", "d"}, "questions": {"e"}}
    seen: set[str] = set()
    for name, phrasing in HELDOUT_PHRASING.items():
        for section, least in minimum.items():
            templates = getattr(phrasing, section)
            assert len(templates) >= least, (name, section, len(templates))
            for template in templates:
                assert fields(template) == slots[section], (name, section, template)
                assert "{{" not in template, template
                assert "}}" not in template, template
                assert "the {e}" not in template.lower(), template
                assert template not in world_templates, template
                assert template not in seen, template
                seen.add(template)
                template.format(e="the billing API", v="8080", d="March 4, 2024")

    def folded(pool: tuple[str, ...]) -> set[str]:
        return {item.casefold() for item in pool}

    for mine, theirs, least in (
        (HELDOUT_FIRST_NAMES, FIRST_NAMES, 60),
        (HELDOUT_LAST_NAMES, LAST_NAMES, 45),
        (HELDOUT_SERVICE_DOMAINS, SERVICE_DOMAINS, 40),
        (HELDOUT_CODENAMES, CODENAMES, 60),
    ):
        assert len(mine) >= least, (len(mine), least)
        assert len(folded(mine)) == len(mine), "duplicate in a held-out pool"
        assert not folded(mine) & folded(theirs), folded(mine) & folded(theirs)
    every_world_name = folded(FIRST_NAMES + LAST_NAMES + SERVICE_DOMAINS + CODENAMES)
    every_heldout_name = folded(HELDOUT_FIRST_NAMES + HELDOUT_LAST_NAMES + HELDOUT_SERVICE_DOMAINS + HELDOUT_CODENAMES)
    assert not every_world_name & every_heldout_name, every_world_name & every_heldout_name
    roles = {slug for slug, _ in SERVICE_ROLES} | {text.casefold() for _, text in SERVICE_ROLES}
    for domain in HELDOUT_SERVICE_DOMAINS:
        assert re.fullmatch(r"[a-z]+(-[a-z]+)*", domain), domain
        assert domain not in roles, domain
    for codename in HELDOUT_CODENAMES:
        assert re.fullmatch(r"[A-Z][a-z]+", codename), codename
        assert codename.casefold() not in {"status", "budget", "deadline", "owner", "lead", "goal"}, codename

    allowed = {"user", "svc", "svc_slug", "proj", "ts", "ms", "n", "hobby", "food", "place", "day"}
    entity_slots = {"user", "svc", "svc_slug", "proj"}
    assert len(HELDOUT_MENTION_TEMPLATES) >= 15
    for template in HELDOUT_MENTION_TEMPLATES:
        used = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
        assert set(used) <= allowed, template
        assert sum(1 for name in used if name in entity_slots) == 1, template
        assert "{{" not in template, template
        assert "}}" not in template, template
        assert template not in world_templates, template
    assert len(set(HELDOUT_MENTION_TEMPLATES)) == len(HELDOUT_MENTION_TEMPLATES)

    counts = {
        section: sum(len(getattr(p, section)) for p in HELDOUT_PHRASING.values())
        for section in ("statements", "restatements", "late", "questions")
    }
    print(f"attributes: {len(HELDOUT_PHRASING)}; templates: {counts}")
    print(
        f"first names {len(HELDOUT_FIRST_NAMES)}, last names {len(HELDOUT_LAST_NAMES)}, "
        f"service domains {len(HELDOUT_SERVICE_DOMAINS)}, codenames {len(HELDOUT_CODENAMES)}, "
        f"mentions {len(HELDOUT_MENTION_TEMPLATES)}"
    )
    print("self-check passed")
