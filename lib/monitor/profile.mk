## lib/monitor/profile.mk: (no sources yet)
