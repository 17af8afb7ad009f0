"""Accounting: every ended attempt kept and queryable with nothing to install (sacct,
sreport, seff). `record` derives records from applied events, `store` keeps them in SQLite,
`feed` connects the two off the request path."""
