#include "gracekeeper/log/log.h"
