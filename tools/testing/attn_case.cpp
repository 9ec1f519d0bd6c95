#include "attn_case.h"
