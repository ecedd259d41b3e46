"""Scheduled turns (DESIGN §16): when a job runs (times), what a job is and the store it lives in
(model), the clock the due-run loop reads (clock), and the `schedules` config section (settings).

The family sits on the sessions floor: it may read the storage face and nothing above it, so the
storage code of both backends, the runtime's due-run loop, the commands, the CLI and the console
can all use the one reading of a schedule written here.
"""
