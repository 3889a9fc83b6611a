/* numpy_math.c - numpy's float64 arithmetic where Megatron's results depend on it bit for bit:
 * the pairwise sum of np.sum and the weight normalisation built on it (splits and blends both
 * normalise weights with it, so the bookends and the greedy blend choices tie and break exactly as
 * Megatron's do).
 */
#include "sampling_internal.h"

/* numpy's pairwise summation (the float64 add reduction): plain loop below 8 elements, eight
 * accumulators up to 128, halves (rounded to multiples of 8) above. */
static double pairwise_sum(const double *a, size_t n) {
    if (n < 8) {
        double res = -0.0;
        for (size_t i = 0; i < n; i++) res += a[i];
        return res;
    }
    if (n <= 128) {
        double r[8];
        size_t i;
        for (int k = 0; k < 8; k++) r[k] = a[k];
        for (i = 8; i < n - (n % 8); i += 8)
            for (int k = 0; k < 8; k++) r[k] += a[i + k];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

double ig_numpy_sum_f64(const double *a, size_t n) {
    return 0.0 + pairwise_sum(a, n);
}

void ig_normalize_weights(const double *w, size_t n, double *out) {
    double sum = ig_numpy_sum_f64(w, n);
    for (size_t i = 0; i < n; i++) out[i] = w[i] / sum;
}
