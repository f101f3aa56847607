// Every tile primitive in one include, for kernels and for the test that instantiates them all.
#pragma once

#include "tile/async_proxy.h"
#include "tile/cp_async.h"
#include "tile/device.h"
#include "tile/fast_math.h"
#include "tile/ldmatrix.h"
#include "tile/mbarrier.h"
#include "tile/mma.h"
#include "tile/named_barrier.h"
#include "tile/numeric_types.h"
#include "tile/setmaxnreg.h"
#include "tile/tma.h"
#include "tile/vector_io.h"
#include "tile/warp_reduce.h"
#include "tile/wgmma.h"
