"""What the server tells about itself: logs, statistics, metrics and traces."""
