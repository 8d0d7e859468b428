/* The pooling loops for one element type, included by pool.c with T (float or double), IDX (an
 * integer as wide as T, so that the max-gradient's select loops vectorize), NAME(x) (x##_f32
 * or x##_f64, x##_f32_avx2, ...) and POOL_TARGET (empty, or the target attribute every function
 * here is compiled with) defined. Windows hold at least one input element (the op's
 * inference requires padding < the pool size); padding never wins a max and is not counted in a
 * mean. */

/* The valid taps of the window at output (oh, ow): [i0, i1) x [j0, j1) in input coordinates. */
POOL_TARGET static inline void NAME(window)(const pool_geometry *g, int64_t oh, int64_t ow,
                                            int64_t *i0, int64_t *i1, int64_t *j0, int64_t *j1) {
    int64_t h0 = oh * g->stride_h - g->pad_t, w0 = ow * g->stride_w - g->pad_l;
    *i0 = h0 < 0 ? 0 : h0;
    *i1 = h0 + g->kh < g->x.h ? h0 + g->kh : g->x.h;
    *j0 = w0 < 0 ? 0 : w0;
    *j1 = w0 + g->kw < g->x.w ? w0 + g->kw : g->x.w;
}

/* Row oh of output image b: y = max (first maximum wins ties) or mean of each window; with
 * index != NULL also the winners' flat indices into x's logical shape (best: C scratch values). */
POOL_TARGET static void NAME(pool_row)(const pool_geometry *g, const T *x, T *y, int64_t *index,
                                       T *best, int64_t b, int64_t oh, bool is_max) {
    const T *xb = x + b * g->x.sn;
    int64_t C = g->x.c, xsc = g->x.sc, ysc = g->y.sc;
    for (int64_t ow = 0; ow < g->y.w; ow++) {
        int64_t i0, i1, j0, j1;
        NAME(window)(g, oh, ow, &i0, &i1, &j0, &j1);
        T *acc = index ? best : y + b * g->y.sn + oh * g->y.sh + ow * g->y.sw;
        int64_t step = index ? 1 : ysc;
        const T *first = xb + i0 * g->x.sh + j0 * g->x.sw;
        if (is_max && !index && xsc == 1 && ysc == 1) { /* NHWC: unit strides, vectorized */
            T *restrict out = acc;
            for (int64_t c = 0; c < C; c++) out[c] = first[c];
            for (int64_t i = i0; i < i1; i++)
                for (int64_t j = i == i0 ? j0 + 1 : j0; j < j1; j++) {
                    const T *restrict xp = xb + i * g->x.sh + j * g->x.sw;
                    for (int64_t c = 0; c < C; c++) {
                        T v = xp[c], old = out[c];
                        out[c] = v > old ? v : old;
                    }
                }
            continue;
        }
        for (int64_t c = 0; c < C; c++) acc[c * step] = first[c * xsc];
        if (index) {
            for (int64_t c = 0; c < C; c++) index[c] = i0 * g->x.w + j0;
        }
        for (int64_t i = i0; i < i1; i++) {
            for (int64_t j = i == i0 ? j0 + 1 : j0; j < j1; j++) {
                const T *xp = xb + i * g->x.sh + j * g->x.sw;
                if (!is_max) {
                    for (int64_t c = 0; c < C; c++) acc[c * step] += xp[c * xsc];
                } else if (!index) {
                    for (int64_t c = 0; c < C; c++) {
                        T v = xp[c * xsc];
                        acc[c * step] = v > acc[c * step] ? v : acc[c * step];
                    }
                } else { /* selects, not branches: random data would mispredict */
                    int64_t at = i * g->x.w + j;
                    for (int64_t c = 0; c < C; c++) {
                        T v = xp[c * xsc];
                        bool wins = v > acc[c];
                        acc[c] = wins ? v : acc[c];
                        index[c] = wins ? at : index[c];
                    }
                }
            }
        }
        if (!is_max) {
            T count = (T)((i1 - i0) * (j1 - j0));
            for (int64_t c = 0; c < C; c++) acc[c * step] /= count;
        }
        if (index) { /* the output is i64, in y's (contiguous) layout */
            int64_t *out_index =
                (int64_t *)g->out_index + b * g->y.sn + oh * g->y.sh + ow * g->y.sw;
            int64_t hw = g->x.h * g->x.w;
            for (int64_t c = 0; c < C; c++)
                out_index[c * ysc] =
                    g->channels_first ? (b * C + c) * hw + index[c] : (b * hw + index[c]) * C + c;
        }
    }
}

/* One 2x2 window's gradient over the C channels: grad at the first maximum of xa, xb, xc, xd
 * (in that order), 0 at the others. A function of its own, with restrict pointers: inlined in
 * max_backward_tiled's loops GCC found "control flow in loop" and left it scalar, with branches. */
POOL_TARGET __attribute__((noinline)) static void
NAME(max_backward_2x2)(const T *restrict xa, const T *restrict xb, const T *restrict xc,
                       const T *restrict xd, const T *restrict grad, T *restrict da,
                       T *restrict db, T *restrict dc, T *restrict dd, int64_t C) {
    for (int64_t c = 0; c < C; c++) {
        T a = xa[c], b = xb[c], e = xc[c], f = xd[c], m = a;
        IDX at = 0;
        at = b > m ? 1 : at;
        m = b > m ? b : m;
        at = e > m ? 2 : at;
        m = e > m ? e : m;
        at = f > m ? 3 : at;
        T gc = grad[c];
        da[c] = at == 0 ? gc : (T)0;
        db[c] = at == 1 ? gc : (T)0;
        dc[c] = at == 2 ? gc : (T)0;
        dd[c] = at == 3 ? gc : (T)0;
    }
}

/* Max-pool gradient of one image when the windows tile it (stride = window, no padding) and
 * channels are innermost (NHWC): each input element is written once, dy at its window's first
 * maximum and 0 elsewhere, with no zeroing pass and no scatter; the winner (tap number in
 * `index`) is found with selects along the channels, which vectorize. Rows and columns past the
 * last window get 0. */
POOL_TARGET static void NAME(max_backward_tiled)(const pool_geometry *g, const T *xb,
                                                 const T *dyb, T *restrict dxb,
                                                 IDX *restrict index, T *restrict best) {
    const int64_t C = g->x.c, kh = g->kh, kw = g->kw, out_h = g->y.h, out_w = g->y.w;
    const int64_t xsh = g->x.sh, xsw = g->x.sw, dsh = g->dx.sh, dsw = g->dx.sw;
    const int64_t ysh = g->y.sh, ysw = g->y.sw, ysc = g->y.sc;
    for (int64_t i = 0; i < g->dx.h; i++) /* rows and columns no window covers */
        for (int64_t j = 0; j < g->dx.w; j++)
            if (i >= out_h * kh || j >= out_w * kw)
                memset(dxb + i * dsh + j * dsw, 0, sizeof(T) * (size_t)C);
    for (int64_t oh = 0; oh < out_h; oh++) {
        for (int64_t ow = 0; ow < out_w; ow++) {
            const T *x0 = xb + oh * kh * xsh + ow * kw * xsw;
            if (kh == 2 && kw == 2 && ysc == 1) { /* the common 2x2 pool: one vectorized loop */
                T *d0 = dxb + oh * 2 * dsh + ow * 2 * dsw;
                NAME(max_backward_2x2)(x0, x0 + xsw, x0 + xsh, x0 + xsh + xsw,
                                       dyb + oh * ysh + ow * ysw, d0, d0 + dsw, d0 + dsh,
                                       d0 + dsh + dsw, C);
                continue;
            }
            for (int64_t c = 0; c < C; c++) {
                best[c] = x0[c];
                index[c] = 0;
            }
            for (int64_t t = 1; t < kh * kw; t++) {
                const T *xp = x0 + (t / kw) * xsh + (t % kw) * xsw;
                for (int64_t c = 0; c < C; c++) {
                    T v = xp[c], old = best[c];
                    IDX was = index[c];
                    best[c] = v > old ? v : old;
                    index[c] = v > old ? (IDX)t : was;
                }
            }
            const T *grad = dyb + oh * ysh + ow * ysw;
            for (int64_t t = 0; t < kh * kw; t++) {
                T *dp = dxb + (oh * kh + t / kw) * dsh + (ow * kw + t % kw) * dsw;
                if (ysc == 1)
                    for (int64_t c = 0; c < C; c++) dp[c] = index[c] == (IDX)t ? grad[c] : (T)0;
                else
                    for (int64_t c = 0; c < C; c++)
                        dp[c] = index[c] == (IDX)t ? grad[c * ysc] : (T)0;
            }
        }
    }
}

/* The gradient of image b: dx (zeroed here, contiguous) gets dy at each window's first maximum
 * (is_max; index/best: C scratch entries) or dy / count at every element of the window. The
 * geometry is copied into locals: stores through index (int64_t) could otherwise alias it and
 * force reloads in the inner loops. */
POOL_TARGET static void NAME(pool_backward_image)(const pool_geometry *g, const T *x,
                                                  const T *dy, T *dx, IDX *restrict index,
                                                  T *restrict best, int64_t b, bool is_max) {
    const int64_t C = g->x.c, xsc = g->x.sc, xsh = g->x.sh, xsw = g->x.sw;
    const int64_t dsh = g->dx.sh, dsw = g->dx.sw, dsc = g->dx.sc;
    const int64_t ysh = g->y.sh, ysw = g->y.sw, ysc = g->y.sc, out_h = g->y.h, out_w = g->y.w;
    T *restrict dxb = dx + b * g->dx.sn;
    /* the tiled path also needs every window inside the image: SAME padding of an odd size pads
     * the bottom and right only, and its last windows reach past the image */
    if (is_max && g->stride_h == g->kh && g->stride_w == g->kw && g->pad_t == 0 && g->pad_l == 0 &&
        out_h * g->kh <= g->x.h && out_w * g->kw <= g->x.w && xsc == 1 && dsc == 1) {
        NAME(max_backward_tiled)(g, x + b * g->x.sn, dy + b * g->y.sn, dxb, index, best);
        return;
    }
    memset(dxb, 0, sizeof(T) * (size_t)(g->dx.h * g->dx.w * g->dx.c));
    const T *xb = is_max ? x + b * g->x.sn : NULL;
    const T *dyb = dy + b * g->y.sn;
    for (int64_t oh = 0; oh < out_h; oh++) {
        for (int64_t ow = 0; ow < out_w; ow++) {
            int64_t i0, i1, j0, j1;
            NAME(window)(g, oh, ow, &i0, &i1, &j0, &j1);
            const T *grad = dyb + oh * ysh + ow * ysw;
            if (!is_max) {
                T count = (T)((i1 - i0) * (j1 - j0));
                for (int64_t c = 0; c < C; c++) best[c] = grad[c * ysc] / count;
                for (int64_t i = i0; i < i1; i++)
                    for (int64_t j = j0; j < j1; j++) {
                        T *dp = dxb + i * dsh + j * dsw;
                        for (int64_t c = 0; c < C; c++) dp[c * dsc] += best[c];
                    }
                continue;
            }
            const T *first = xb + i0 * xsh + j0 * xsw;
            IDX first_at = (IDX)(i0 * dsh + j0 * dsw);
            for (int64_t c = 0; c < C; c++) {
                best[c] = first[c * xsc];
                index[c] = first_at;
            }
            for (int64_t i = i0; i < i1; i++) {
                for (int64_t j = i == i0 ? j0 + 1 : j0; j < j1; j++) {
                    const T *xp = xb + i * xsh + j * xsw;
                    IDX at = (IDX)(i * dsh + j * dsw);
                    if (xsc == 1) { /* NHWC: unit stride, so the selects vectorize */
                        for (int64_t c = 0; c < C; c++) {
                            T v = xp[c], old = best[c];
                            IDX was = index[c];
                            best[c] = v > old ? v : old;
                            index[c] = v > old ? at : was;
                        }
                        continue;
                    }
                    for (int64_t c = 0; c < C; c++) { /* selects, not branches */
                        T v = xp[c * xsc];
                        bool wins = v > best[c];
                        best[c] = wins ? v : best[c];
                        index[c] = wins ? at : index[c];
                    }
                }
            }
            for (int64_t c = 0; c < C; c++) dxb[index[c] + c * dsc] += grad[c * ysc];
        }
    }
}
