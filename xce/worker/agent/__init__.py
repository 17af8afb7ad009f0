"""The worker's agent: registers the host, follows the controller's desired job set (link,
reconcile), reports ends (reports) and live output (tail).
"""
