#!/usr/bin/python3
"""fit_erfc.py - the coefficients of ds_normcdf (kernels/common/gpt_math.h).

The exact GELU is x Phi(x), and Phi's tail below 0 is erfc(z) / 2 with
z = |x| / sqrt 2.  gpt_math.h writes erfc(z) = t exp(P(t) - z^2) with
t = 1 / (1 + z / 2), so that P(t) = log(erfc(z) / t) + z^2 is smooth and
bounded on the whole half line (it tends to -log(2 sqrt pi) as z grows).
This script interpolates that function by a polynomial of degree 10 at the
Chebyshev points of t in [1/7, 1] (z in [0, 12]; past 12 the float
exponential underflows whatever P is) in 40-digit arithmetic, and prints
the coefficients, highest degree first, in the Horner order the C code
uses, with the interpolation's error bound (about 1.5e-8: below a float's
rounding, so the kernel's error is its float arithmetic's).

Usage: /usr/bin/python3 contrib/math/fit_erfc.py  (needs python3-mpmath)
"""
import mpmath as mp

mp.mp.dps = 40
DEGREE = 10
T_MIN = mp.mpf(1) / 7


def target(t):
    z = 2 / t - 2
    return mp.log(mp.erfc(z) / t) + z * z


def main():
    coeffs, err = mp.chebyfit(target, [T_MIN, 1], DEGREE + 1, error=True)
    print("/* degree %d on t in [%s, 1], interpolation error %s */" % (DEGREE, mp.nstr(T_MIN, 6), mp.nstr(err, 3)))
    print("float p = %.10ef;" % float(coeffs[0]))
    for c in coeffs[1:]:
        print("p = p * t + %.10ef;" % float(c))


if __name__ == "__main__":
    main()
