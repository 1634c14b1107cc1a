## lib/monitor/log.mk: (no sources yet)
