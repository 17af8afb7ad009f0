"""Submit-time checks: whether any host could ever run a job, so an impossible one is refused with
a reason instead of pending for ever.
"""
