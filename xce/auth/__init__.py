"""Identity and access: JWT tokens, RBAC, the IP guard and the pluggable login backends."""
