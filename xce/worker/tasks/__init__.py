"""The task service behind `xce launch`: requests from job code, task processes started into the
job's cgroup, the jobs' own `xce`, and the share cgroups a multi-host job holds on its other
hosts.
"""
