"""Validation phrasing for the evolving world: statements, restatements, late facts, questions, names and mentions.

A third phrasing half, beside world.py's own ("tuning") and
``phrasing_heldout.py`` ("heldout"). It was written independently of
``sidecar/`` (its author read neither the retrieval nor the perception code,
nor the benchmark results of the evolving world) and of the other two halves'
templates, from how agents' notes, users in chat, tool and config output,
tickets, changelogs, Slack threads, meeting notes and CRM entries phrase
things. Its name pools are disjoint from both other halves' pools.

What it is for: checking that a change tuned on the tuning half generalises to
wording it was not tuned on *before* spending the held-out run, which may be
made only once per change. It is a validation split, not a held-out one:
figures on it are not held-out figures and must not be quoted as such, and once
it has been used to choose between changes it is no longer unseen. Even so,
never fit anything to it — no thresholds, keyword lists, prompts or weights
tuned until it looks good — or it stops telling whether a change generalises.

Slots are those of ``phrasing_heldout.py``: attribute templates use ``{e}``
(the entity as written: "Alice Moreau", "Alice", "the billing API",
"billing-api", "the billing-api service", "Project Falcon", "Falcon", "the
Falcon project"), ``{v}`` (the value, from the value pools the halves share)
and, in late templates, ``{d}`` (the date since which the value had held).
Questions use ``{e}`` only. Mention templates use the slots of world.py's
``MENTION_TEMPLATES`` (one entity slot each: ``{user}``, ``{svc}`` /
``{svc_slug}`` or ``{proj}``).
"""

from __future__ import annotations

from benchmarks.quality.phrasing_heldout import AttributePhrasing


def _words(text: str) -> tuple[str, ...]:
    """A name pool written compactly: one name per whitespace-separated word."""
    return tuple(text.split())


VALIDATION_PHRASING: dict[str, AttributePhrasing] = {
    # -- services ------------------------------------------------------------------------------------------------
    "port": AttributePhrasing(
        statements=(
            "{e}: listener moved to :{v}",
            "PORT={v} is now set in the environment of {e}.",
            "Heads up in #platform: {e} serves traffic on {v}/tcp as of this rollout.",
            "After today's deploy {e} binds {v}, so adjust any hard-coded URLs.",
            "Ticket closed — change the port of {e} to {v}. Done and verified in staging and prod.",
            "We've switched {e} over; it listens on port number {v} as of the last deploy.",
            "kubectl describe for {e} now shows containerPort: {v}",
            "Per the infra sync, {v} is going to be the port for {e} from now on.",
            'User in chat: "point the client at {e} on {v}, the old port is gone"',
        ),
        restatements=(
            "Verified again with curl: {e} still responds on {v}.",
            "No change to the port of {e}; it remains {v}.",
            "Sanity check done — {e} is on {v}, same as last week.",
            "{e} port still {v} (reconfirmed during the audit)",
            "Still {v} for {e}, I just looked at the manifest.",
        ),
        late=(
            "Found in an old runbook: {e} has been listening on {v} since {d}, we only learnt it now.",
            "Correction for the record — the port of {e} was changed to {v} back on {d}.",
            "Turns out {e} has accepted connections on port {v} from {d} onward; the docs lagged behind.",
        ),
        questions=(
            "what port does {e} use nowadays?",
            "Which TCP port should clients use to reach {e}?",
            "{e} port?",
            "Could you tell me the port number {e} currently listens on?",
            "Remind me, what's the port for {e} these days?",
            "If I want to curl {e} directly, which port do I hit?",
        ),
    ),
    "endpoint": AttributePhrasing(
        statements=(
            "{e} base URL changed -> {v}",
            "New endpoint for {e}: {v} (please update your clients).",
            "From the release notes: {e} is now reachable at {v}.",
            "Clients of {e} should call {v} going forward.",
            "Updated the service catalog entry for {e}; its URL now reads {v}.",
            "The address of {e} is {v} after the migration.",
            "Can confirm {e} moved. Hit {v} instead of the old address.",
            "BASE_URL for {e} set to {v} in the shared config repo.",
        ),
        restatements=(
            "{e} is still served from {v}; nothing moved.",
            "Double-checked the catalog: {e} at {v}, unchanged.",
            "The URL of {e} remains {v}.",
            "Yep, {v} is still the right address for {e}.",
        ),
        late=(
            "Only noticed now that {e} has been answering at {v} since {d}.",
            "Per the DNS history, {e} switched to {v} on {d} and never switched back.",
            "Backfilling a note: {v} became the URL of {e} on {d}.",
        ),
        questions=(
            "what's the URL for {e}?",
            "Where is {e} hosted, i.e. which endpoint should I call?",
            "Which base URL does {e} answer on at the moment?",
            "{e} endpoint pls",
            "Please provide the current endpoint address of {e}.",
            "What address do clients use to reach {e} now?",
        ),
    ),
    "version": AttributePhrasing(
        statements=(
            "Rolled out {v} of {e} to prod.",
            "{e} bumped to {v}",
            "Changelog — {e} {v}: released today.",
            "Release train update: {e} is now running {v} in every environment.",
            "We upgraded {e}; the deployed build is {v}.",
            "helm list shows {e} with app version {v}",
            "The version of {e} in production is {v} as of this afternoon.",
            "Tagged and shipped {v} for {e}, release notes to follow.",
        ),
        restatements=(
            "{e} remains on {v}, no release this week.",
            "Prod check: {e} still reports {v}.",
            "Nothing new deployed, {e} is at {v}.",
            "Confirmed {v} is still what {e} runs.",
        ),
        late=(
            "Looking at the deploy log, {e} has actually run {v} since {d}.",
            "Late update: {v} of {e} went live on {d}, and it has been that way since.",
            "FYI {e} was upgraded to {v} on {d}; I'm only recording it now.",
        ),
        questions=(
            "which version of {e} is deployed?",
            "What release is {e} on right now?",
            "{e} — current version?",
            "What build of {e} is running in production today?",
            "Could you confirm the deployed version number of {e}?",
            "is {e} up to date, what version is it running?",
        ),
    ),
    "owner": AttributePhrasing(
        statements=(
            "Ownership of {e} moves to the {v} team.",
            "{e} now belongs to {v}.",
            "CODEOWNERS updated: {e} is assigned to {v}.",
            "From the reorg doc: {v} takes over {e}.",
            "{e} is maintained by {v} from this sprint on.",
            "Handover done, {v} owns {e} now.",
            "Team responsible for {e}: {v}",
            "The {v} folks picked up {e} after the reshuffle.",
        ),
        restatements=(
            "{v} still owns {e}.",
            "Ownership of {e} unchanged ({v}).",
            "Checked the service catalog, {e} is still with {v}.",
            "{e} stays with the {v} team.",
        ),
        late=(
            "It seems {v} has owned {e} since {d}; the catalog was stale.",
            "Correction: {e} was handed to {v} on {d}.",
            "Record fix — {v} took over {e} back on {d}.",
        ),
        questions=(
            "who owns {e}?",
            "Which team is responsible for {e} these days?",
            "{e} owner team?",
            "Who should I ask about {e}, which team maintains it?",
            "Please state the team that currently owns {e}.",
            "whose service is {e}?",
        ),
    ),
    "region": AttributePhrasing(
        statements=(
            "{e} has been moved to {v}.",
            "Region for {e}: {v}",
            "Migration complete: {e} now runs in {v}.",
            "We redeployed {e} in {v} last night.",
            "{e} is hosted out of {v} after the failover project.",
            "terraform apply done, {e} region = {v}",
            "Going forward {e} lives in the {v} region.",
            "Infra: cut {e} over to {v} this morning, old region drained.",
        ),
        restatements=(
            "{e} is still in {v}.",
            "No region change for {e}, still {v}.",
            "Confirmed during the DR drill that {e} runs in {v}.",
            "{e} stays in {v}.",
        ),
        late=(
            "{e} has actually been running in {v} since {d}.",
            "Late note: {e} moved to {v} on {d}.",
            "Per the cloud billing export, {e} has been in {v} from {d}.",
        ),
        questions=(
            "what region is {e} in?",
            "Where is {e} deployed, region-wise?",
            "Which cloud region hosts {e}?",
            "{e} region?",
            "In which region does {e} currently run?",
            "Which region should I look in for the instances of {e}?",
        ),
    ),
    "database": AttributePhrasing(
        statements=(
            "Storage swap done: {e} persists everything to {v} now",
            "DB for {e}: {v}",
            "We migrated {e} onto {v}.",
            "{e} switched its backing store to {v} last night.",
            "The datastore behind {e} is {v} after the migration.",
            "ADR accepted: {e} uses {v}.",
            "{v} is the database of {e} from now on.",
            "Finished the cutover, {e} reads and writes {v} now.",
        ),
        restatements=(
            "{e} persists to {v}, unchanged.",
            "Datastore for {e} unchanged: {v}",
            "Yes, {e} keeps using {v}.",
            "Confirmed {e} talks to {v}, as before.",
        ),
        late=(
            "Found out {e} has been on {v} since {d}.",
            "The cutover of {e} to {v} actually happened on {d}.",
            "Backfill: {e} has used {v} as its database from {d}.",
        ),
        questions=(
            "what database does {e} use?",
            "Which datastore is {e} backed by?",
            "{e} db?",
            "What does {e} persist to, DB-wise?",
            "Kindly confirm the database engine {e} runs on.",
            "What's behind {e} storage-wise?",
        ),
    ),
    "oncall": AttributePhrasing(
        statements=(
            "{v} is on call for {e} this rotation.",
            "PagerDuty: primary for {e} is now {v}",
            "On-call handoff for {e} — {v} has the pager.",
            "Page {v} if {e} breaks this week.",
            "{e} on-call is {v} starting today.",
            "Rotation changed; {v} covers {e}.",
            "This week's responder for incidents on {e}: {v}",
            "Swapped shifts, so {v} holds the pager for {e} now.",
        ),
        restatements=(
            "{v} still has the pager for {e} this week.",
            "No change in the rotation of {e}: {v}.",
            "Pager for {e} still with {v}.",
            "{e} on-call remains {v}.",
        ),
        late=(
            "Turns out {v} has been on call for {e} since {d}.",
            "The schedule shows {v} took the pager for {e} on {d}.",
            "Missed this: {v} has covered {e} from {d}.",
        ),
        questions=(
            "who's on call for {e}?",
            "Who do I page if {e} goes down?",
            "{e} on-call?",
            "Which engineer currently holds the pager for {e}?",
            "Who is the responder for incidents on {e} right now?",
            "Who's carrying the pager for {e} at the moment?",
        ),
    ),
    "rate_limit": AttributePhrasing(
        statements=(
            "{e} is now throttled at {v}.",
            "Rate limit on {e} set to {v}.",
            "Quota change: {e} allows {v} per client.",
            "{e} caps traffic at {v} from today.",
            "config: {e}.ratelimit = {v}",
            "Adjusted the limit of {e}; it's {v} now.",
            "Throttling for {e} is {v} after the capacity review.",
            "Clients will get 429s above {v} on {e}.",
        ),
        restatements=(
            "{e} still throttles at {v}.",
            "Limit on {e} unchanged: {v}",
            "Confirmed {e} allows {v}, same as before.",
            "{v} remains the cap for {e}.",
        ),
        late=(
            "{e} has been limited to {v} since {d}, it turns out.",
            "The throttle of {e} was set to {v} on {d}; nobody told us.",
            "Per the gateway audit log, {e} has capped at {v} from {d}.",
        ),
        questions=(
            "what's the rate limit on {e}?",
            "How many req/s will {e} accept before throttling?",
            "{e} throttle?",
            "At what rate does {e} start rejecting requests?",
            "Please state the request limit currently configured for {e}.",
            "how hard can I hit {e} before it starts returning 429s?",
        ),
    ),
    # -- users ---------------------------------------------------------------------------------------------------
    "meeting_preference": AttributePhrasing(
        statements=(
            '{e} told me: "honestly I\'d rather have {v}"',
            "Meeting pref for {e}: {v}",
            "{e} prefers {v} now.",
            "When booking with {e}, go for {v}.",
            "From my 1:1 with {e}: they want {v}.",
            "CRM note ({e}): scheduling preference changed to {v}.",
            "{e} asked that we stick to {v} from now on.",
            "For meetings, {e} now wants {v}.",
        ),
        restatements=(
            "{e} still prefers {v}.",
            "Same as before, {e} likes {v}.",
            "Checked with {e}: {v} is still their preference for meetings.",
            "Meeting preference for {e} unchanged — {v}.",
        ),
        late=(
            "Apparently {e} has wanted {v} since {d}; I had missed it.",
            "{e} mentioned they switched to {v} back on {d}.",
            "Note dug out of an old thread: {v} has been the meeting preference of {e} since {d}.",
        ),
        questions=(
            "how does {e} like meetings scheduled?",
            "What's the meeting preference of {e}?",
            "When booking time with {e}, what should I aim for?",
            "{e} meetings — any preference?",
            "Could you remind me how {e} prefers to meet?",
            "What kind of meeting slot works best for {e}?",
        ),
    ),
    "language": AttributePhrasing(
        statements=(
            "{e} writes mostly {v} these days.",
            "Primary language for {e}: {v}",
            '{e} said: "I\'m doing everything in {v} now."',
            "{e} switched over to {v} for day-to-day work.",
            "Profile updated, the go-to language of {e} is {v}.",
            "{v} is what {e} prefers to code in.",
            "Pairing with {e}? Expect {v}.",
            "{e} has moved their main stack to {v}.",
        ),
        restatements=(
            "{e} is still a {v} person.",
            "{e} codes in {v}, same as before.",
            "Language preference of {e} unchanged: {v}",
            "Yep, {e} still reaches for {v} first.",
        ),
        late=(
            "{e} has been working mainly in {v} since {d}, I learnt today.",
            "{e} told me they moved to {v} on {d}.",
            "Looking back at the commits, {e} has written {v} since {d}.",
        ),
        questions=(
            "what language does {e} code in?",
            "Which programming language does {e} reach for first?",
            "{e} main language?",
            "In which language should I write the example for {e}?",
            "What's the go-to programming language of {e}?",
            "Please confirm the preferred programming language of {e}.",
        ),
    ),
    "editor": AttributePhrasing(
        statements=(
            "{e} moved to {v}.",
            "Editor: {v} ({e})",
            "{e} is using {v} for everything now.",
            "{e} said they ditched their old setup for {v}.",
            "Dev env note for {e}: IDE is {v}.",
            "{v} is now the editor of choice for {e}.",
            "When sharing configs with {e}, make them work in {v}.",
            '{e}: "switched to {v}, not looking back"',
        ),
        restatements=(
            "{e} still edits in {v}.",
            "The editor of {e} remains {v}.",
            "Still {v} for {e}, I saw it on the screen share.",
            "No change, {e} uses {v}.",
        ),
        late=(
            "{e} has been on {v} since {d}, as it turns out.",
            "{e} mentioned they switched editors to {v} on {d}.",
            "Belatedly: since {d}, {e} has worked in {v}.",
        ),
        questions=(
            "which editor is {e} on these days?",
            "What IDE is {e} on?",
            "{e} editor?",
            "Which editor should the config be for, what does {e} prefer?",
            "Do you know what {e} writes code in, editor-wise?",
            "Kindly confirm the current editor or IDE of {e}.",
        ),
    ),
    "contact": AttributePhrasing(
        statements=(
            "Best way to reach {e}: {v}.",
            "{e} asked us to switch to {v} whenever we need them.",
            "CRM: preferred channel for {e} set to {v}.",
            '{e}: "ping me through {v}, please"',
            "For anything urgent, contact {e} by {v}.",
            "{e} prefers {v} over every other channel.",
            "Updated the contact card: reach {e} via {v}.",
            "If you need {e}, use {v}; that's what they asked for.",
        ),
        restatements=(
            "{e} still prefers {v}.",
            "Contact channel for {e} unchanged: {v}",
            "Reach {e} through {v}, same as before.",
            "Confirmed: {v} is still how {e} wants to be contacted.",
        ),
        late=(
            "{e} has preferred {v} since {d}; I only saw it now.",
            "According to an old email, {e} switched to {v} on {d}.",
            "Note: from {d} on, {e} has wanted to be reached via {v}.",
        ),
        questions=(
            "how do I reach {e}?",
            "What's the best way to contact {e}?",
            "{e} preferred channel?",
            "Through which channel does {e} want to be contacted?",
            "If I need {e} quickly, how should I get hold of them?",
            "Please state the preferred contact method of {e}.",
        ),
    ),
    "location": AttributePhrasing(
        statements=(
            "{e} packed up and relocated: {v} is home now.",
            "Location: {v} — {e}",
            "{e} is now based in {v}.",
            "HR update: {e} works out of {v}.",
            "{e} moved; the new home base is {v}.",
            '{e} said: "I\'m in {v} now, schedule accordingly."',
            "Address book updated for {e}: {v}",
            "Heads up, {e} lives in {v} now.",
        ),
        restatements=(
            "{e} is still in {v}.",
            "Location of {e} unchanged: {v}",
            "{e} remains based in {v}.",
            "Yes, {e} is still working out of {v} for now.",
        ),
        late=(
            "{e} has been based in {v} since {d}, it turns out.",
            "{e} mentioned they moved to {v} on {d}.",
            "Late HR note: the location of {e} has been {v} since {d}.",
        ),
        questions=(
            "where does {e} sit, geographically?",
            "Which city does {e} work from?",
            "{e} location / timezone?",
            "Where does {e} live these days?",
            "In what city and time zone is {e} located?",
            "What's the home base of {e} now?",
        ),
    ),
    "role": AttributePhrasing(
        statements=(
            "{e} switched roles and is now serving as {v}.",
            "Title change: {e} is {v} from Monday.",
            "{e} is now working as {v}.",
            "Org chart updated — {e}, {v}.",
            "{e} moved into the {v} role.",
            "Announcing that {e} takes on the role of {v}.",
            "The job title of {e} now reads {v}.",
            "New position for {e}: {v}",
        ),
        restatements=(
            "{e} is still {v}.",
            "Role of {e} unchanged: {v}",
            "Org chart confirms {e} as {v}.",
            "{e} continues in the {v} role.",
        ),
        late=(
            "{e} has been {v} since {d}; the directory was outdated.",
            "{e} actually took on the {v} role on {d}.",
            "Catching up: since {d}, the title of {e} has been {v}.",
        ),
        questions=(
            "what's {e}'s role?",
            "What is the current job title of {e}?",
            "{e} — what do they do here?",
            "Which position does {e} hold at the moment?",
            "Remind me what title {e} has?",
            "In what capacity is {e} working now?",
        ),
    ),
    "goal": AttributePhrasing(
        statements=(
            "Goal of {e} for this quarter: {v}.",
            "{e} wants to {v}.",
            "OKR set by {e}: {v}",
            "In our 1:1 {e} said the priority is to {v}.",
            "{e} is now focused on trying to {v}.",
            "Top objective for {e} — {v}.",
            '{e}: "my main aim this half is to {v}"',
            "Goal updated for {e}: {v}",
        ),
        restatements=(
            "{e} still wants to {v}.",
            "The objective of {e} hasn't changed: {v}.",
            "Same goal for {e}, {v}.",
            "Checked in with {e}: still aiming to {v}.",
        ),
        late=(
            "{e} has been aiming to {v} since {d}, I now realise.",
            "From old 1:1 notes: on {d}, {e} set the goal to {v}.",
            "Since {d}, the main objective of {e} has been to {v}.",
        ),
        questions=(
            "what is {e} working towards?",
            "What's the main goal of {e} right now?",
            "{e} OKR?",
            "What does {e} want to achieve this quarter?",
            "Could you summarise the current objective of {e}?",
            "What's {e} aiming for at the moment?",
        ),
    ),
    "diet": AttributePhrasing(
        statements=(
            "Dietary note for {e}: {v}.",
            "{e} told the office manager their diet is {v}.",
            "Catering form for {e} says {v}.",
            "{e} updated their dietary requirements to {v}.",
            "Food preference ({e}): {v}",
            "For team lunches, the requirement of {e} is {v}.",
            "Offsite RSVP from {e}, diet: {v}",
            "{e} mentioned their diet changed: {v}.",
        ),
        restatements=(
            "The dietary requirement of {e} is still {v}.",
            "Diet for {e} unchanged: {v}",
            "Same as before for {e}: {v}.",
            "Reconfirmed with {e} for the dinner: {v}.",
        ),
        late=(
            "The dietary needs of {e} have been {v} since {d}, I just learnt.",
            "{e} said their diet changed to {v} on {d}.",
            "An old RSVP shows the diet of {e} as {v} from {d} onward.",
        ),
        questions=(
            "any dietary restrictions for {e}?",
            "What does {e} eat, any requirements?",
            "{e} diet?",
            "What should I keep in mind food-wise when ordering for {e}?",
            "Please confirm the dietary requirements of {e}.",
            "Can {e} eat anything, or is there a restriction?",
        ),
    ),
    "working_hours": AttributePhrasing(
        statements=(
            "{e} works {v} now.",
            "Hours for {e}: {v}",
            "{e} shifted their schedule to {v}.",
            "Calendar says {e} is available {v}.",
            '{e}: "from now on I\'m online {v}"',
            "Working hours of {e} changed to {v}.",
            "Don't book {e} outside {v}.",
            "Slack status of {e} now says: working hours {v}",
        ),
        restatements=(
            "{e} still works {v}.",
            "Hours for {e} unchanged: {v}",
            "{e} keeps to {v}.",
            "Checked the calendar, {e} is on {v} as before.",
        ),
        late=(
            "{e} has been working {v} since {d}, apparently.",
            "{e} changed their hours to {v} on {d}.",
            "Late calendar note: since {d}, {e} works {v}.",
        ),
        questions=(
            "what are the office hours of {e}?",
            "When is {e} online?",
            "{e} working hours?",
            "What's a safe time window to reach {e} during the day?",
            "Please state the current working hours of {e}.",
            "When does the workday of {e} start and end?",
        ),
    ),
    # -- projects ------------------------------------------------------------------------------------------------
    "deadline": AttributePhrasing(
        statements=(
            "{e} is due {v}.",
            "Deadline for {e} moved to {v}.",
            "Steering committee decided the ship date of {e} is {v}; no further slips.",
            "New target date for {e} — {v}",
            "Due date: {v} ({e})",
            "We've committed to delivering {e} on {v}.",
            "{e} now has to land by {v}.",
            "Jira: due date of the {e} epic set to {v}",
        ),
        restatements=(
            "{e} is still due {v}.",
            "No slip: the deadline of {e} remains {v}.",
            "Confirmed in standup, {e} targets {v}.",
            "Target for {e} unchanged — {v}.",
        ),
        late=(
            "Just saw that on {d} the deadline of {e} was set to {v}.",
            "Since {d}, {e} has been due on {v}; the tracker never showed it.",
            "Late note: on {d} leadership moved the due date of {e} to {v}.",
        ),
        questions=(
            "when does {e} have to be done by?",
            "What's the current due date on {e}?",
            "{e} due date?",
            "What date is {e} pencilled in for?",
            "Could you confirm the current target date of {e}?",
            "When are we supposed to deliver {e}?",
        ),
    ),
    "lead": AttributePhrasing(
        statements=(
            "{v} is the new lead on {e}, effective this week.",
            "Lead for {e}: {v}",
            "{e} has a new lead, {v}.",
            "{v} takes over as lead of {e}.",
            "Kickoff notes: {e}, led by {v}.",
            "DRI for {e} changed to {v}.",
            "Going forward, {v} runs {e}.",
            "Please direct questions about {e} to {v}, who leads it now.",
        ),
        restatements=(
            "{v} still leads {e}.",
            "Lead of {e} unchanged: {v}",
            "{v} remains in charge of {e}.",
            "Yes, {e} is still run by {v}.",
        ),
        late=(
            "{v} has led {e} since {d}; the wiki lagged.",
            "Correction: {v} became lead of {e} on {d}.",
            "From {d} on, {e} has been led by {v}.",
        ),
        questions=(
            "who's running {e}?",
            "Who's the lead on {e}?",
            "{e} DRI?",
            "Who is in charge of {e} now?",
            "Which person is responsible for running {e}?",
            "Who should I talk to about {e}, who leads it?",
        ),
    ),
    "milestone": AttributePhrasing(
        statements=(
            "Next milestone for {e}: {v}.",
            "{e} is now working towards {v}.",
            "Roadmap update — the upcoming milestone of {e} is {v}.",
            "The team behind {e} has shifted focus to {v}.",
            "Planning: {e} targets {v} next.",
            "The next checkpoint for {e} is {v}.",
            "Milestone changed on {e}: {v}",
            "After the review, {e} is aiming at {v}.",
        ),
        restatements=(
            "The next milestone of {e} is still {v}.",
            "No change: {e} heads for {v}.",
            "{e} still working towards {v}.",
            "Milestone for {e} unchanged ({v}).",
        ),
        late=(
            "Since {d}, the next milestone of {e} has been {v}.",
            "On {d}, {e} refocused on {v}; only recorded now.",
            "Turns out {e} has been targeting {v} since {d}.",
        ),
        questions=(
            "what's the next milestone for {e}?",
            "What is {e} working towards right now?",
            "{e} next milestone?",
            "Which milestone is {e} aiming for?",
            "Please state the upcoming milestone of {e}.",
            "What's the next big checkpoint for {e}?",
        ),
    ),
    "status": AttributePhrasing(
        statements=(
            "Status of {e}: {v}.",
            "As of today {e} counts as {v} on the portfolio board.",
            "Weekly report: {e} — {v}",
            '{e} status changed to "{v}".',
            "Project board: {e} -> {v}",
            "PM update: {e} is currently {v}.",
            "Standup recap, {e} is {v}.",
            "The health of {e} is now reported as {v}.",
        ),
        restatements=(
            "Still {v}: {e}, per this week's report.",
            "Status unchanged for {e}: {v}",
            "Weekly check: {e} remains {v}.",
            "{e}, still {v}.",
        ),
        late=(
            "{e} has been {v} since {d}, per the PM.",
            "The status of {e} flipped to {v} on {d}.",
            "Since {d}, {e} has been reported as {v}.",
        ),
        questions=(
            "how's {e} looking this week?",
            "What's the latest status report on {e}?",
            "{e} status?",
            "Where does {e} stand at the moment?",
            "Could you give me the current status of {e}?",
            "any update on how {e} is progressing?",
        ),
    ),
    "budget": AttributePhrasing(
        statements=(
            "Budget for {e}: {v}.",
            "{e} has been allocated {v}.",
            "Finance signed off on {v} (for {e}), effective immediately.",
            "Funding envelope of {e}: {v}, per the finance sync",
            "Revised funding for {e} — {v}",
            "We can spend up to {v} on {e}.",
            "Budget line for {e} updated to {v}.",
            "{v} is the cap for {e} after the planning cycle.",
        ),
        restatements=(
            "The budget of {e} is still {v}.",
            "No change to the funding of {e}: {v}.",
            "Finance reconfirmed {v} for {e}.",
            "{e} remains funded at {v}.",
        ),
        late=(
            "Since {d}, {e} has had a budget of {v}.",
            "Finance says the budget of {e} was set to {v} on {d}.",
            "Missed memo: {e} was funded at {v} from {d}.",
        ),
        questions=(
            "what did finance give {e} to spend?",
            "How much cash is earmarked for {e}?",
            "{e} budget?",
            "How much are we allowed to spend on {e}?",
            "Please confirm the approved budget of {e}.",
            "What's {e} funded at right now?",
        ),
    ),
    "repository": AttributePhrasing(
        statements=(
            "The code of {e} now lives at {v}.",
            "Repo for {e}: {v}",
            "We moved {e} to {v}.",
            "git remote set-url origin {v}   # {e}",
            "Clone {e} from {v} from now on.",
            "{e} migrated its source to {v}.",
            "The codebase of {e} is hosted at {v}.",
            "README updated: source of {e} is at {v}",
        ),
        restatements=(
            "{e} is still at {v}.",
            "Repo unchanged for {e}: {v}",
            "Yes, clone {e} from {v}, as before.",
            "{v} remains the home of the code of {e}.",
        ),
        late=(
            "{e} has lived at {v} since {d}.",
            "The repo of {e} was moved to {v} on {d}.",
            "Git history shows {e} moved to {v} on {d}.",
        ),
        questions=(
            "which git remote should I use for {e}?",
            "Which repository holds {e}?",
            "{e} repo?",
            "Where can I clone {e} from?",
            "Please provide the repository URL of {e}.",
            "Where does the source of {e} live now?",
        ),
    ),
    "tracker": AttributePhrasing(
        statements=(
            "Tickets for {e} now go to {v}.",
            "Tracker for {e}: {v}",
            "We're tracking {e} in {v} from now on.",
            "{e} moved its backlog to {v}.",
            "Bugs for {e} should be filed in {v} from today on.",
            "Work items for {e} are managed in {v}.",
            "PM note: {e} uses {v} for planning.",
            "Please log issues about {e} in {v}.",
        ),
        restatements=(
            "Work on {e} continues to be tracked in {v}.",
            "The backlog of {e} remains in {v}.",
            "Same place as before: {e} is in {v}.",
            "Confirmed, file bugs for {e} in {v}.",
        ),
        late=(
            "{e} has been tracked in {v} since {d}.",
            "The backlog of {e} moved to {v} on {d}.",
            "Since {d}, the work on {e} has been in {v}.",
        ),
        questions=(
            "where are the tickets for {e}?",
            "Which tracker does {e} use?",
            "{e} board?",
            "Where should I file a bug for {e}?",
            "In which tool is the work on {e} tracked?",
            "Where does the backlog of {e} live?",
        ),
    ),
    "stakeholder": AttributePhrasing(
        statements=(
            "Main stakeholder for {e}: {v}.",
            "{e} is now being built for {v}.",
            "{v} is the sponsor of {e}.",
            "{e} has a new primary stakeholder, {v}.",
            "Account team: {e} delivers to {v}.",
            "Reporting for {e} goes to {v} from now on.",
            "{v} signed on as the key stakeholder of {e}.",
            "Who's the customer for {e}? {v}, as of this week.",
        ),
        restatements=(
            "{v} remains the party {e} is being delivered for.",
            "Stakeholder for {e} unchanged: {v}",
            "{e} still reports to {v}.",
            "Yes, {e} is still for {v}.",
        ),
        late=(
            "{v} has been the sponsor of {e} since {d}.",
            "The stakeholder of {e} changed to {v} on {d}.",
            "From {d} on, {e} has been delivered for {v}.",
        ),
        questions=(
            "who is {e} for?",
            "Who's the main customer behind {e}?",
            "{e} sponsor?",
            "Which customer or team is {e} being built for?",
            "Please name the primary stakeholder of {e}.",
            "Who do we report to on {e}?",
        ),
    ),
}
"""Per attribute of world.py's ``ATTRIBUTES`` (by name), its validation wording."""

# -- names: disjoint from world.py's and phrasing_heldout.py's pools, case-insensitively ----------------------

VALIDATION_FIRST_NAMES: tuple[str, ...] = _words(
    """
    Marisol Ayesha Oksana Leilani Niamh Cormac Bartosz Henrik Solveig Thiago Chiamaka Tendai Rutendo Efua Ren
    Minji Jisoo Arjun Priyanka Kavya Ishaan Meera Farida Emre Cem Mikko Aino Eero Liisa Matthias Annika Florian
    Pieter Femke Joost Sanne Anastasia Vlad Irina Milica Lorenzo Giulia Leonor Aidan Maeve Declan Callum Eilidh
    Carys Owain Bronwen Silas Harriet Rupert Imogen Clementine Desmond Winifred Ezekiel Odessa Thaddeus
    Marguerite Roxana Darius Shirin Kian Layla Malik Imani Keisha Dante Marisela Paloma Esteban Rodrigo Lupita
    Margaux Bastien Apolline Soren Freja Astrid Aroha Tane Mele Losa Bongani Thandiwe Sipho Zanele Ngozi Chidi
    Gwendolyn Leopold Ottilie Casimir Benedetta Evander Rosalind Alistair Philippa Crispin Henrietta Barnaby
    Wilhelmina Ignatius Perpetua Lysander Cordelia Fitzroy Araminta Ptolemy Seraphina Horatio Delphine
    Evangeline Anselm
    """
)
"""First names of users (one word each)."""

VALIDATION_LAST_NAMES: tuple[str, ...] = _words(
    """
    Kowalczyk Petrovic Abernathy Oyelaran Haugen Richter Valdivia Kaczmarek Delacroix Ferraro Achterberg Rahimi
    Takeda Venkataraman Yamazaki Zielinski Bjornsson Mbeki Quintero Laurent Obradovic Papadakis Hollister
    Sorensen Thorne Underwood Villanueva Ashworth Brannigan Castillo Fontaine Grunewald Hartmann Iwasaki Kapoor
    Lombardi Marchetti Novotny Oduya Pellegrini Quigley Salazar Uchenna Vermeulen Westbrook Acheampong
    Bhattacharya Cardenas Donnelly Eklund Fitzgerald Gutierrez Holmberg Ikeda Kirchner Lundgren Osei Pacheco
    Reinholt Varga Wainwright Yoshida Zubiri
    """
)
"""Last names of users (one word each)."""

VALIDATION_SERVICE_DOMAINS: tuple[str, ...] = _words(
    """
    voucher tenancy pricing-rules bidding shipping-label fraud-score entitlement license sms-relay captcha
    audit-trail token feature-toggle cohort clickstream helpdesk referral affiliate subscription refund
    e-signature pdf-render glossary timesheet rostering geofence telematics fleet weather-feed status-page
    uptime log-shipping metrics-rollup backup archival dedupe cart-pricing seat-map parcel-tracking kiosk
    voicemail chatbot-intent dns-zone cdn-purge otp-delivery spam-filter address-lookup vat-calc
    plagiarism-check loan-scoring claims-intake pharmacy-refill lab-results ride-matching table-reservation
    gift-card warranty tariff-lookup menu-sync queue-ticket
    """
)
"""What a service is about; world.py joins a domain and a role ("kiosk" -> "kiosk-api")."""

VALIDATION_CODENAMES: tuple[str, ...] = _words(
    """
    Marigold Lodestar Fennec Wisteria Obelisk Cormorant Galleon Vesper Caldera Ptarmigan Anemone Bastion
    Dromedary Escarpment Geyser Hemlock Isthmus Jackal Kelpie Rook Tarragon Umber Walrus Zinnia Argon Alder
    Bittern Cassowary Dunlin Egret Firefly Gannet Hornbill Iguana Jacana Loris Mongoose Oriole Quail Rhea Skua
    Tapir Urchin Vole Yak Cypress Dogwood Eucalyptus Foxglove Gorse Hawthorn Kapok Larch Mimosa Nettle Oleander
    Primrose Quince Sorrel Thistle Verbena Yew Beryl Citrine Diorite Garnet Malachite Peridot Tourmaline
    Sandstone Gneiss Pumice Scoria Ammonite Trilobite Belemnite Crinoid Brachiopod Stromatolite Feldspar
    Rhyolite Andesite Basanite Dolerite Gabbro Komatiite Lamprophyre Pegmatite Syenite Tonalite Chert Jaspilite
    Coquina Marl Travertine Tufa Loess
    """
)
"""Project codenames (one word each; world.py adds its suffixes)."""

# -- remarks naming an entity without stating any of its attributes ----------------------------------------------

VALIDATION_MENTION_TEMPLATES: tuple[str, ...] = (
    # users
    "Lunch with {user} ran long; we talked about {hobby} most of the time.",
    "{user} is out on {day}, back the day after.",
    "{user} sent a photo from {place}, looks amazing.",
    "[{ts}] {user} joined the call late (audio issues again)",
    "{user} brought {food} for the whole floor today.",
    "Note to self: thank {user} for the careful review comments.",
    "{user} reacted with :tada: to the announcement in #general.",
    "Quick hallway chat with {user}, nothing actionable.",
    "{user} posted {n} photos in #random from the weekend.",
    "Coffee with {user} got pushed to {day}.",
    # services
    "[{ts}] GET /healthz on {svc_slug} returned 200 in {ms} ms",
    "Someone in #help asked whether {svc} is related to the old monolith; nobody knew.",
    "{svc} showed up in {n} stack traces during the load test, all from the client side.",
    "The dashboard for {svc} looks flat today, nothing to see.",
    "{svc_slug}: {n} pods restarted after the node drain, all healthy again",
    "Reviewed a PR that only touches log formatting in {svc}.",
    "[{ts}] alert resolved: disk usage on {svc_slug} back under threshold",
    "Drew a diagram of how {svc} fits into the request flow, for the newcomers.",
    "Nobody remembers why {svc} got that odd name.",
    # projects
    "{proj} came up at the all-hands, mostly applause.",
    "Wrote a short retro doc for the last sprint of {proj}: {n} action items, mostly process.",
    "Sticker designs for {proj} arrived and the designer nailed it.",
    "Demoed {proj} to the interns on {day}.",
    "Someone changed the Slack emoji for {proj} again.",
    "{proj} got a shout-out in the company newsletter.",
    "[{ts}] {n} new comments on the design doc of {proj}",
    "Team dinner to celebrate {proj}: {food} at the place near the office.",
)
"""Chit-chat and logs that name a user (``{user}``), a service (``{svc}``, ``{svc_slug}``) or a project (``{proj}``)."""
