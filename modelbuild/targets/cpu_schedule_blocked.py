"""The CPU default schedule for channel-blocked convolutions (placeholder, filled below)."""
