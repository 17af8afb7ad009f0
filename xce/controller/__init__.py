"""The controller's service layer: requests become events, events are committed, and the
controller's loops run on what they change.

    API request ──requests (typed)──▶ submission / job_actions / modify / admin ...
                                         │ events
                                         ▼
                            service.commit: apply to ClusterState, log to the WAL
                                         │ changes
            ┌────────────────────────────┼────────────────────────────┐
            ▼                            ▼                            ▼
    scheduling (plan(snapshot, now))   workers (desired sets,      bus (the event stream),
    -> JobStarted events               heartbeats, finish reports)  history, tails

The service is the only caller of `ClusterState.apply` outside recovery and a standby's
replay; the server (xce/server) builds it with its store, scheduler and observers.
"""
