/* ds.h - umbrella header of libds, the library the dstk tools share.
 * Modules (DESIGN.md "Layers", lower never includes higher): util, config,
 * comm, app, kernels, model, optim, engine, io, monitor, tune, driver. */
#ifndef DS_H
#define DS_H

#include "util/err.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/timer.h"
#include "util/half.h"
#include "util/rng.h"
#include "util/crc32c.h"

#endif
