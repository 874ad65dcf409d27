import Foundation

/// An SQLite write-ahead log, read as the file format says
/// (https://sqlite.org/fileformat2.html#walformat): the committed content of each page it holds.
public struct WriteAheadLog: Sendable {
    /// A file that is not a write-ahead log.
    public struct NotALog: Error, CustomStringConvertible {
        public let description: String
    }

    /// The page size the log records.
    public let pageSize: Int
    /// The latest committed content of each page in the log, by page number.
    public private(set) var pages: [Int: Data] = [:]
    /// The database's size in pages after the log's last commit.
    public private(set) var databasePages = 0

    /// Reads the log's bytes.
    public init(_ data: Data) throws {
        let bytes = [UInt8](data)
        func be32(_ offset: Int) -> Int { bytes[offset..<(offset + 4)].reduce(0) { $0 << 8 | Int($1) } }
        guard bytes.count >= 32, be32(0) == 0x377F_0682 || be32(0) == 0x377F_0683 else {
            throw NotALog(description: "not a write-ahead log (\(bytes.count) bytes)")
        }
        pageSize = be32(8)
        let salts = (be32(16), be32(20))
        var pending: [Int: Data] = [:]
        var offset = 32
        while offset + 24 + pageSize <= bytes.count, be32(offset + 8) == salts.0, be32(offset + 12) == salts.1 {
            pending[be32(offset)] = Data(bytes[(offset + 24)..<(offset + 24 + pageSize)])
            let commitSize = be32(offset + 4)
            if commitSize > 0 {
                pages.merge(pending) { $1 }
                pending = [:]
                databasePages = commitSize
            }
            offset += 24 + pageSize
        }
    }

    /// Does what a checkpoint does, in its order (ascending page numbers), up to and including
    /// page `last`, and stops there, as a process killed in the middle of it does: every page of
    /// this log up to `last` written into `database` at its place, the log left as it is.
    public func interruptCheckpoint(of database: URL, after last: Int) throws {
        let handle = try FileHandle(forUpdating: database)
        defer { try? handle.close() }
        for page in pages.keys.sorted() where page <= last {
            guard let content = pages[page] else { continue }
            try handle.seek(toOffset: UInt64((page - 1) * pageSize))
            try handle.write(contentsOf: content)
        }
        try handle.synchronize()
    }
}

/// What a database file's header says about its size, and what the file has.
public struct DatabaseHeader: CustomStringConvertible, Sendable {
    /// The page size the header gives.
    public let pageSize: Int
    /// The page count the header gives.
    public let pageCount: Int
    /// The file's size in bytes.
    public let fileSize: Int

    /// Reads the header of the database at `url`.
    public init(_ url: URL) throws {
        let bytes = [UInt8](try Data(contentsOf: url))
        func be32(_ offset: Int) -> Int { bytes[offset..<(offset + 4)].reduce(0) { $0 << 8 | Int($1) } }
        let raw = Int(bytes[16]) << 8 | Int(bytes[17])
        pageSize = raw == 1 ? 65536 : raw
        pageCount = be32(28)
        fileSize = bytes.count
    }

    /// The header counts more pages than the file holds.
    public var isAheadOfFile: Bool { pageCount * pageSize > fileSize }

    /// The header's page count and size, and the file's size.
    public var description: String { "header: \(pageCount) pages of \(pageSize) bytes; file: \(fileSize) bytes" }
}

/// The pages of an SQLite database file, as the file format lays them out.
public enum SQLitePages {
    /// The page size the database header at the start of `bytes` gives.
    public static func pageSize(_ bytes: Data) -> Int {
        let raw = Int(bytes[bytes.startIndex + 16]) << 8 | Int(bytes[bytes.startIndex + 17])
        return raw == 1 ? 65536 : raw
    }

    /// The leaf pages (type 0x0A) of the index b-tree rooted at page `root`.
    public static func indexLeaves(_ bytes: Data, root: Int) -> [Int] {
        let pageSize = pageSize(bytes)
        func byte(_ offset: Int) -> Int { Int(bytes[bytes.startIndex + offset]) }
        func be(_ offset: Int, _ count: Int) -> Int { (0..<count).reduce(0) { $0 << 8 | byte(offset + $1) } }
        func leaves(_ page: Int) -> [Int] {
            let start = (page - 1) * pageSize
            guard start >= 0, start + pageSize <= bytes.count else { return [] }
            switch byte(start) {
            case 0x0A: return [page]
            case 0x02:
                let cells = be(start + 3, 2)
                var children = (0..<cells).map { be(start + be(start + 12 + 2 * $0, 2), 4) }
                children.append(be(start + 8, 4))
                return children.flatMap(leaves)
            default: return []
            }
        }
        return leaves(root)
    }

    /// Writes 16 random bytes in the middle of the cell content area of `page` of the database
    /// at `url` (where the index's keys are, not the page's free space); returns them.
    @discardableResult
    public static func scribble(on page: Int, of url: URL) throws -> [UInt8] {
        var bytes = try Data(contentsOf: url)
        let pageSize = pageSize(bytes)
        let start = (page - 1) * pageSize
        let content = Int(bytes[start + 5]) << 8 | Int(bytes[start + 6])
        let offset = start + content + (pageSize - content) / 2
        var generator = SystemRandomNumberGenerator()
        let garbage = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
        bytes.replaceSubrange(offset..<(offset + 16), with: garbage)
        try bytes.write(to: url)
        return garbage
    }
}
