extension Array {
    /// The array in slices of `size` elements (the last one shorter): keys read from a store a
    /// bounded number at a time.
    func chunked(_ size: Int) -> [ArraySlice<Element>] {
        stride(from: 0, to: count, by: size).map { self[$0..<Swift.min($0 + size, count)] }
    }
}
