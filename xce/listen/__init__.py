"""What XCE's HTTP listeners share below the API: the connection guard (read timeouts and
a cap on connections per address) of the controller, its standbys' door and workers' relays."""
