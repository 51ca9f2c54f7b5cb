// The r x r linear algebra of the gauge fix (proxy/aggregate.h), r being a LoRA rank (tens):
// square, row-major, F64, without a library. Each routine is the textbook one for small
// matrices, accurate to a few ulps of the largest entry: cyclic Jacobi for symmetric
// eigenvalues, one-sided (Hestenes) Jacobi for singular values, Gauss-Jordan with partial
// pivoting for the inverse.
#pragma once

#include <cstddef>
#include <vector>

namespace brl::proxy::small {

// The eigenvalues of the symmetric n x n matrix a, ascending.
std::vector<double> symmetric_eigenvalues(std::vector<double> a, size_t n);
// The singular values of the n x n matrix a, descending.
std::vector<double> singular_values(std::vector<double> a, size_t n);
// a := a^-1. False (a unspecified) when a is singular: a pivot is 0 or not finite.
bool invert(std::vector<double>& a, size_t n);

}  // namespace brl::proxy::small
