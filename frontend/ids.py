"""Every component id of the dashboard, in one place (pages and callbacks import them from here).

Ids shared by several pages (the live curves graph and its trace map) are deliberately the same on the
Lab, Compare and Run pages: only one page is mounted at a time, so one clientside callback serves all.
"""

# app shell (always mounted)
URL = "nl-url"  # dcc.Location of the shell (read-only use: the page modules read query params)
TICK = "nl-tick"  # dcc.Interval (frontend/app.py TICK_MS): statuses, probes and log lines to Dash
LIVE_STATUS = "nl-live-status"  # dcc.Store {run_id: status} as the stream reports it
PRESENT = "nl-present"  # dcc.Store: presentation mode on/off (?present=1)
PRESENT_TOGGLE = "nl-present-toggle"  # button: presentation mode on/off (reloads with ?present=1)
COPY_LINK = "nl-copy-link"  # button "Copy link"
COPY_DONE = "nl-copy-done"  # "Link copied" note
EMBED = "nl-embed"  # button "Embed": copies an <iframe> of this page's runs (frontend/embed.py)
EMBED_DONE = "nl-embed-done"  # "Embed code copied" note
NAV = "nl-nav"

# the live curves graph (Lab, Compare, Run)
CURVES = "nl-curves"  # dcc.Graph
CURVES_SINK = "nl-curves-sink"  # dummy output of the clientside drain (it extends the graph itself)
CURVES_MAP = "nl-curves-map"  # dcc.Store: trace map {runs: {run_id: {series: trace index, ...}}, ...}
WATCH = "nl-watch"  # dcc.Store {runs: [...], cursor: {run_id: seq}}: what this tab's stream follows
WATCH_SINK = "nl-watch-sink"  # dummy output of the clientside "watch" callback
URL_STATE = "nl-url-state"  # dcc.Store {key: value}: the page state mirrored into the URL query
URL_SINK = "nl-url-sink"

# Lab
LAB_TASK = "lab-task"
LAB_NORM = "lab-norm"
LAB_FIELD = "lab-field"  # pattern-matching: {"type": LAB_FIELD, "field": name}
LAB_ERROR = "lab-error"  # pattern-matching: {"type": LAB_ERROR, "field": name}
LAB_SWEEP = "lab-sweep"  # checklist: sweep mode on
LAB_SWEEP_NORMS = "lab-sweep-norms"
LAB_SWEEP_BATCH = "lab-sweep-batch"
LAB_SWEEP_SEEDS = "lab-sweep-seeds"
LAB_SWEEP_BOX = "lab-sweep-box"
LAB_SINGLE_NORM_BOX = "lab-single-norm-box"
LAB_SUBMIT = "lab-submit"
LAB_MESSAGE = "lab-message"
LAB_TASK_HELP = "lab-task-help"
LAB_RUNS = "lab-runs"  # list of the runs this tab started, with status badges
LAB_COMPARE_LINK = "lab-compare-link"
LAB_PROBE_FIELD = "lab-probe-field"  # pattern-matching: {"type": LAB_PROBE_FIELD, "field": name}
LAB_PROBE_BOX = "lab-probe-box"  # the probe settings, shown while probes are on
LAB_BOARD = "lab-board"  # dcc.Store {runs: [...]}: the runs on the Live card
LAB_RUNS_DATA = "lab-runs-data"  # dcc.Store: those runs as the API returned them (for the chips)
LAB_FORM_DEFAULTS = "lab-form-defaults"  # dcc.Store {task: {field: default}}: what the URL leaves out
LAB_LIMITS = "lab-limits"  # dcc.Store {field: {min, max, min_open}}: the server's limits
LAB_QUEUE_POLL = "lab-queue-poll"  # dcc.Interval: the board's queued runs' positions, while any waits
LAB_STRIP = "lab-strip"  # the compact probe strip of the newest board run with probes
LAB_STRIP_GRAPH = "lab-strip-graph"
LAB_STRIP_RUN = "lab-strip-run"  # dcc.Store: that run's id (None: the strip is hidden)
LAB_STRIP_PROBES = "lab-strip-probes"  # dcc.Store: its hidden/fisher snapshots from the stream
LAB_CLEAR = "lab-clear"  # button: take every run off the Live card

# Runs
RUNS_FILTER = "runs-filter"  # pattern-matching: {"type": RUNS_FILTER, "field": name}
RUNS_TABLE = "runs-table"
RUNS_REFRESH = "runs-refresh"
RUNS_POLL = "runs-poll"
RUNS_COMPARE = "runs-compare"
RUNS_CANCEL = "runs-cancel"
RUNS_DELETE = "runs-delete"
RUNS_MESSAGE = "runs-message"
RUNS_NAME = "runs-name"  # the selected run's name, tags and note, editable (frontend/run_labels.py)
RUNS_TAGS = "runs-tags"
RUNS_NOTE = "runs-note"
RUNS_LABELS_SAVE = "runs-labels-save"
RUNS_LABELS_MESSAGE = "runs-labels-message"
RUNS_LABELS_RUN = "runs-labels-run"  # dcc.Store: the id of the run whose fields are shown
RUNS_LABELS_WHICH = "runs-labels-which"  # which run the fields belong to, or how to pick one

# Compare
CMP_RUNS = "cmp-runs"
CMP_SMOOTH = "cmp-smooth"
CMP_COLOR = "cmp-color"
CMP_X = "cmp-x"
CMP_PANELS = "cmp-panels"
CMP_MESSAGE = "cmp-message"
CMP_GO = "cmp-go"  # dcc.Location: an empty Compare opens the last comparison (assets/normlab.js)
CMP_RESTORE = "cmp-restore"  # dcc.Store, on an empty Compare only: asks for that
CMP_LAST_KEY = "normlab.compare"  # localStorage key of the last comparison's query string
CMP_GROUP = "cmp-group"  # dcc.Store: the group (preset or sweep) this Compare shows, or None
CMP_GROUP_BOX = "cmp-group-box"  # its card: verdicts, mean ± std bands, results table
CMP_GROUP_POLL = "cmp-group-poll"  # dcc.Interval: refresh the group until every run ended
GROUP_IDS = {
    "verdicts": "cmp-group-verdicts",
    "bands": "cmp-group-bands",
    "table": "cmp-group-table",
    "table_box": "cmp-group-table-box",
}
LAB_SMOOTH = "lab-smooth"  # smoothing slider of the Lab's live curves (frontend/smoothing.py)
RUN_SMOOTH = "run-smooth"  # smoothing slider of a run's curves

# Run
RUN_ID = "run-id"  # dcc.Store with the run id
RUN_SPEC = "run-spec"  # dcc.Store with the run's resolved spec (for the theory lines)
RUN_HEADER = "run-header"
RUN_PROBES = "run-probes"  # dcc.Store {hidden: [...], fisher: [...]} filled by the stream
RUN_HIDDEN = "run-hidden"
RUN_FISHER = "run-fisher"
RUN_CANCEL = "run-cancel"
RUN_RESUME = "run-resume"  # a lost run's Resume button
RUN_NAME = "run-name"  # the run's name, tags and note, editable by its owner (frontend/run_labels.py)
RUN_TAGS = "run-tags"
RUN_NOTE = "run-note"
RUN_LABELS_SAVE = "run-labels-save"
RUN_LABELS_MESSAGE = "run-labels-message"
RUN_LOG = "run-log"  # the run's log lines, warnings first
RUN_INIT_GRADS = "run-init-grads"  # graph: a Transformer's per-block gradient norms at initialisation
RUN_LINES = "run-lines"  # dcc.Store [line, ...]: log lines, status changes and evaluations from the stream
RUN_FISHER_WARNING = "run-fisher-warning"  # why the Fisher panel is empty (from the log), above it
RUN_FISHER_RETRY = "run-fisher-retry"  # link: the same run set up in the Lab with the budget that fits
RUN_MESSAGE = "run-message"

# Invariance
INV_TABLE = "inv-table"

# Presets
PRESET_START = "preset-start"  # pattern-matching: {"type": PRESET_START, "name": preset}
PRESET_MESSAGE = "preset-message"
PRESET_GO = "preset-go"  # dcc.Location used to open Compare after starting a preset
PRESET_VERDICT = "preset-verdict"  # pattern-matching: {"type": PRESET_VERDICT, "name": preset}
PRESET_PRESENT = "preset-present"  # dcc.Store bool: the page is in presentation mode (?present=1)
PRESET_LATEST = "preset-latest"  # dcc.Store {preset: group id}: each preset's latest launch on the server
PRESET_GROUPS = "preset-groups"  # dcc.Store (localStorage) {preset: group id} of the last launches
PRESET_POLL = "preset-poll"  # dcc.Interval: refresh the launched groups' verdicts until they end
PRESET_REPLICATE = "preset-replicate"  # pattern-matching button: {"type": …, "name": preset}
PRESET_REPLICATION = "preset-replication"  # pattern-matching: a card's replication record
PRESET_REPLICATING = "preset-replicating"  # dcc.Store [preset]: fresh draws launched from this page
PRESET_REPLICATION_LIVE = "preset-replication-live"  # pattern-matching dcc.Store: its draw is being judged
PRESET_REPLICATION_POLL = "preset-replication-poll"  # dcc.Interval: refresh records while draws run

# Forks and interventions (frontend/fork_view.py)
FORK_STEP = "nl-fork-step"
FORK_NORM = "nl-fork-norm"
FORK_LR = "nl-fork-lr"
FORK_BATCH = "nl-fork-batch"
FORK_STEPS = "nl-fork-steps"
FORK_SEED = "nl-fork-seed"
FORK_GO = "nl-fork-go"
FORK_MESSAGE = "nl-fork-message"
FORK_LOCATION = "nl-fork-location"  # dcc.Store: the child's page to open
FORK_SINK = "nl-fork-sink"
FORK_RUN = "nl-fork-run"  # dcc.Store: the run a fork starts from (the clicked curve's)
FORK_OPENS = "nl-fork-opens"  # dcc.Store: True = open the child's page (Run), False = add it to the board
FORK_CHILD = "nl-fork-child"  # dcc.Store: the child just made, for the Lab's board
LINEAGE = "nl-lineage"
CHANGE_LR = "nl-change-lr"
CHANGE_WD = "nl-change-wd"
CHANGE_GO = "nl-change-go"
CHANGE_MESSAGE = "nl-change-message"
CHANGE_RUN = "nl-change-run"  # dcc.Store: the run "change now" changes (None: the clicked curve's run)
