/* The math.h a cpu_c kernel compiles against: the functions a kernel may import (float and double forms) and
   the constants and classification macros that need no import. Nothing else is declared. */
#ifndef AGENTRL_MATH_H
#define AGENTRL_MATH_H

typedef float float_t;
typedef double double_t;

#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
#define HUGE_VAL __builtin_huge_val()
#define HUGE_VALF __builtin_huge_valf()
#define M_E 2.7182818284590452354
#define M_LN2 0.69314718055994530942
#define M_PI 3.14159265358979323846
#define M_PI_2 1.57079632679489661923
#define M_SQRT2 1.41421356237309504880
#define M_2_SQRTPI 1.12837916709551257390
#define isnan(x) __builtin_isnan(x)
#define isinf(x) __builtin_isinf(x)
#define isfinite(x) __builtin_isfinite(x)
#define signbit(x) __builtin_signbit(x)

#define AGENTRL_DECLARE(name) double name(double); float name##f(float);
#define AGENTRL_DECLARE2(name) double name(double, double); float name##f(float, float);
AGENTRL_DECLARE(exp) AGENTRL_DECLARE(exp2) AGENTRL_DECLARE(expm1) AGENTRL_DECLARE(log) AGENTRL_DECLARE(log2)
AGENTRL_DECLARE(log1p) AGENTRL_DECLARE(sqrt) AGENTRL_DECLARE(cbrt) AGENTRL_DECLARE(tanh) AGENTRL_DECLARE(sinh)
AGENTRL_DECLARE(cosh) AGENTRL_DECLARE(sin) AGENTRL_DECLARE(cos) AGENTRL_DECLARE(tan) AGENTRL_DECLARE(atan)
AGENTRL_DECLARE(erf) AGENTRL_DECLARE(erfc) AGENTRL_DECLARE(fabs) AGENTRL_DECLARE(floor) AGENTRL_DECLARE(ceil)
AGENTRL_DECLARE(round) AGENTRL_DECLARE(rint) AGENTRL_DECLARE(trunc)
AGENTRL_DECLARE2(atan2) AGENTRL_DECLARE2(pow) AGENTRL_DECLARE2(fmax) AGENTRL_DECLARE2(fmin)
AGENTRL_DECLARE2(hypot) AGENTRL_DECLARE2(copysign)
double fma(double, double, double);
float fmaf(float, float, float);
#undef AGENTRL_DECLARE
#undef AGENTRL_DECLARE2

#endif
