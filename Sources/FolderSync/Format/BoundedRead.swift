import Foundation

extension Data {
    /// The contents of the file at `url` if it holds at most `limit` bytes; `nil` if it is
    /// missing, cannot be read, or is larger. A larger file is not read at all (its size is
    /// looked at first), and no more than `limit + 1` bytes are read whatever happens meanwhile:
    /// a file another device wrote can be hostile.
    init?(contentsOf url: URL, atMost limit: Int) {
        guard let handle = try? FileHandle(forReadingFrom: url) else { return nil }
        defer { try? handle.close() }
        guard let size = try? handle.seekToEnd(), size <= UInt64(limit), (try? handle.seek(toOffset: 0)) != nil,
            let data = try? handle.read(upToCount: limit + 1) ?? Data(), data.count <= limit
        else { return nil }
        self = data
    }
}
