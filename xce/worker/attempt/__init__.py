"""One job attempt on this host: its directories (spool), account and environment, launch and end
(executor), control (suspend, resume, kill), usage, recovery after a worker restart, and every
file operation on the job's tree done as the job's user (userfs, fscreds, staging).
"""
