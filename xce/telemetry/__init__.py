"""What XCE says about itself: logging set-up, Prometheus metrics, the event loop's lag
histogram."""
