"""`xce simulate`: replays a workload (SWF traces or a synthetic one) in virtual time through the
live scheduler and reports waits, slowdowns and utilisation.
"""
