// placeholder until its owner writes it
#include "cpu/cpu_backend.h"
namespace flashattn::cpu { void reference_fwd(const AttnProblem&, bool) {} void reference_bwd(const AttnProblem&, bool) {} }
