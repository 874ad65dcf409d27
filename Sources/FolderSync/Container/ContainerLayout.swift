import Foundation

/// Where a store's logs live in a container, and what the names found there mean.
///
/// ```
/// <container>/
///   <storeName>/                  storeFolder
///     devices/                    devicesFolder
///       <device id>/              deviceFolder(_:), written only by that device
///         0000000000000001.cclog  logURL(device:sequence:), one immutable log each
///         0000000000000002.cclog
/// ```
///
/// Log names are the sequence in decimal, zero-padded to 16 digits so that names sort in sequence
/// order, with the extension `cclog`. Everything else in a device folder is classified by
/// ``classify(fileName:)``: a temporary (ours or a file-sync engine's), a sync engine's conflict
/// copy of a log, or something unrelated.
public struct ContainerLayout: Sendable, Hashable {
    /// What a name in a device folder is.
    public enum EntryKind: Sendable, Hashable {
        /// A log, with its sequence number.
        case log(sequence: UInt64)
        /// A file still being written: one of Concord's own temporaries (`.NAME.RANDOM.concord-tmp`),
        /// or a file-sync engine's (Syncthing, Dropbox, rclone) or an NFS client's. Never a log yet.
        case temporary
        /// A file-sync engine's conflict copy of the log with this sequence (Syncthing, Dropbox,
        /// Nextcloud and rclone bisync spellings).
        case conflictCopy(of: UInt64)
        /// Anything else.
        case other
    }

    /// The extension of log files, without the dot.
    public static let logExtension = "cclog"
    /// The suffix of Concord's own temporary files (the same as FileCoordination's, so presenters
    /// and item queries ignore them too).
    public static let temporarySuffix = ".concord-tmp"

    /// The name of the file in which a device says which logs it applied (its acknowledgement).
    static let acknowledgementName = "applied.json"
    /// How a baseline's name starts (`baseline-`, then the number of logs it covers).
    static let baselinePrefix = "baseline-"
    /// The extension of a baseline's name.
    static let baselineExtension = "ccbase"

    /// The shared directory.
    public let container: URL
    /// The store's name: its folder's name in the container.
    public let storeName: String

    /// The layout of `storeName` in `container`.
    ///
    /// - Precondition: `storeName` is one path component: not empty, `.` or `..`, and without `/`.
    public init(container: URL, storeName: String) {
        precondition(
            !storeName.isEmpty && storeName != "." && storeName != ".." && !storeName.contains("/"),
            "a store name must be a single path component: \"\(storeName)\""
        )
        self.container = container
        self.storeName = storeName
    }

    /// The store's folder: `container/storeName`.
    public var storeFolder: URL { container.appendingPathComponent(storeName, isDirectory: true) }

    /// The folder that holds one folder per device: `storeFolder/devices`.
    public var devicesFolder: URL { storeFolder.appendingPathComponent("devices", isDirectory: true) }

    /// The folder of `device`'s logs. `device` should be a valid id (``isValidDeviceID(_:)``).
    public func deviceFolder(_ device: String) -> URL {
        devicesFolder.appendingPathComponent(device, isDirectory: true)
    }

    /// Where `device`'s log `sequence` lives.
    public func logURL(device: String, sequence: UInt64) -> URL {
        deviceFolder(device).appendingPathComponent(Self.logFileName(sequence: sequence), isDirectory: false)
    }

    /// `0000000000000007.cclog`: the sequence zero-padded to 16 digits (more for sequences past
    /// 10^16), so that names sort in sequence order.
    public static func logFileName(sequence: UInt64) -> String {
        paddedSequence(sequence) + "." + logExtension
    }

    /// Whether `id` can name a device: 1 to 64 of `A-Z a-z 0-9 . _ -`, not starting with `.`,
    /// so it is a safe file name that no sync engine or shell treats specially.
    public static func isValidDeviceID(_ id: String) -> Bool {
        let utf8 = id.utf8
        guard (1...64).contains(utf8.count), utf8.first != UInt8(ascii: ".") else { return false }
        return utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"):
                return true
            default:
                return false
            }
        }
    }

    /// What the file `fileName` in a device folder is.
    ///
    /// | name | kind |
    /// | --- | --- |
    /// | `0000000000000007.cclog` | `.log(sequence: 7)` |
    /// | `.NAME.RANDOM.concord-tmp` (Concord, FileCoordination) | `.temporary` |
    /// | `.syncthing.NAME.tmp`, `~syncthing~NAME.tmp` (Syncthing) | `.temporary` |
    /// | `.~NAME`, `NAME.dropbox`, `.dropbox.cache` (Dropbox) | `.temporary` |
    /// | `NAME.partial`, `.NAME.partial`, `NAME.HASH.partial` (rclone) | `.temporary` |
    /// | `.unison.NAME.HASH.unison.tmp` (unison) | `.temporary` |
    /// | `.NAME.XXXXXX`, NAME a log or a device's file (rsync) | `.temporary` |
    /// | `.nfsXXXX` (an NFS client's silly rename) | `.temporary` |
    /// | `0000000000000007.sync-conflict-YYYYMMDD-HHMMSS-DEVICE.cclog` (Syncthing) | `.conflictCopy(of: 7)` |
    /// | `0000000000000007 (conflicted copy YYYY-MM-DD).cclog`, `... (Someone's conflicted copy ...).cclog` (Dropbox, Nextcloud) | `.conflictCopy(of: 7)` |
    /// | `0000000000000007.conflict1.cclog`, `0000000000000007.cclog..path1` (rclone bisync) | `.conflictCopy(of: 7)` |
    /// | anything else, including sequence 0 and unpadded or over-padded numbers | `.other` |
    public static func classify(fileName name: String) -> EntryKind {
        if isTemporary(name) { return .temporary }
        let suffix = "." + logExtension
        if name.hasSuffix(suffix) {
            let stem = String(name.dropLast(suffix.count))
            if let sequence = sequence(ofStem: stem) { return .log(sequence: sequence) }
            if let sequence = conflictedSequence(stem) { return .conflictCopy(of: sequence) }
            return .other
        }
        // rclone bisync's older spelling: the whole name, then `..path1` or `..path2`.
        for marker in ["..path1", "..path2"] where name.hasSuffix(suffix + marker) {
            if let sequence = sequence(ofStem: String(name.dropLast(suffix.count + marker.count))) {
                return .conflictCopy(of: sequence)
            }
        }
        return .other
    }

    // MARK: - Names

    private static func isTemporary(_ name: String) -> Bool { temporaryOwner(name) != nil }

    /// Who makes a temporary file named `name`: `Concord`, a file-sync engine (`Syncthing`,
    /// `Dropbox`, `rclone`, `unison`, `rsync`) or `an NFS client`; `nil` when it is no temporary.
    static func temporaryOwner(_ name: String) -> String? {
        if name.hasSuffix(temporarySuffix) && !isRsyncTemporary(name) { return "Concord" }
        if (name.hasPrefix(".syncthing.") || name.hasPrefix("~syncthing~")) && name.hasSuffix(".tmp") {
            return "Syncthing"
        }
        if name.hasPrefix(".~") || name.hasSuffix(".dropbox") || name == ".dropbox.cache" { return "Dropbox" }
        if name.hasSuffix(".partial") { return "rclone" }
        // unison 2.5x: `.unison.NAME.HASH.unison.tmp`.
        if name.hasPrefix(".unison.") && name.hasSuffix(".unison.tmp") { return "unison" }
        if isRsyncTemporary(name) { return "rsync" }
        if name.hasPrefix(".nfs") { return "an NFS client" }
        return nil
    }

    /// rsync's temporary of a file it is receiving: `.NAME.XXXXXX` (six letters or digits) for
    /// a name that is a log, one of a device's JSON files, or one of Concord's temporaries.
    private static func isRsyncTemporary(_ name: String) -> Bool {
        let utf8 = Array(name.utf8)
        guard utf8.count > 8, utf8[0] == UInt8(ascii: "."), utf8[utf8.count - 7] == UInt8(ascii: ".") else {
            return false
        }
        let random = utf8[(utf8.count - 6)...]
        guard
            random.allSatisfy({
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0)
                    || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0)
                    || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0)
            })
        else { return false }
        let inner = String(decoding: utf8[1..<(utf8.count - 7)], as: UTF8.self)
        return inner.hasSuffix("." + logExtension) || inner.hasSuffix(".json") || inner.hasSuffix(".plist")
            || inner.hasSuffix(temporarySuffix)
    }

    private static func paddedSequence(_ sequence: UInt64) -> String {
        let digits = String(sequence)
        return digits.count >= 16 ? digits : String(repeating: "0", count: 16 - digits.count) + digits
    }

    /// The sequence a canonical stem names: all digits, exactly as ``paddedSequence(_:)`` spells
    /// it, and not 0.
    private static func sequence(ofStem stem: String) -> UInt64? {
        guard stem.utf8.count >= 16, stem.utf8.count <= 20,
            stem.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
            let value = UInt64(stem), value > 0, paddedSequence(value) == stem
        else { return nil }
        return value
    }

    /// The sequence of a conflict copy's stem (the name without `.cclog`).
    private static func conflictedSequence(_ stem: String) -> UInt64? {
        // Syncthing: `NAME.sync-conflict-YYYYMMDD-HHMMSS-DEVICE`.
        if let marker = stem.range(of: ".sync-conflict-") {
            let rest = stem[marker.upperBound...].utf8
            guard rest.count > 16, isStamp(Array(rest.prefix(16))) else { return nil }
            return sequence(ofStem: String(stem[..<marker.lowerBound]))
        }
        // Dropbox and Nextcloud: `NAME (conflicted copy ...)`, `NAME (Someone's conflicted copy ...)`.
        if let open = stem.range(of: " ("), stem.hasSuffix(")"),
            stem[open.upperBound...].contains("conflicted copy")
        {
            return sequence(ofStem: String(stem[..<open.lowerBound]))
        }
        // rclone bisync: `NAME.conflict1`, `NAME.conflict2`, ...
        if let marker = stem.range(of: ".conflict", options: .backwards) {
            let number = stem[marker.upperBound...].utf8
            guard !number.isEmpty, number.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
                return nil
            }
            return sequence(ofStem: String(stem[..<marker.lowerBound]))
        }
        return nil
    }

    /// `YYYYMMDD-HHMMSS-`.
    private static func isStamp(_ bytes: [UInt8]) -> Bool {
        bytes.enumerated().allSatisfy { index, byte in
            index == 8 || index == 15
                ? byte == UInt8(ascii: "-") : (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
        }
    }
}

extension ContainerLayout {
    /// The sequences of `device`'s logs present in its folder, ascending (conflict copies and
    /// temporaries not included): what an exporter continues from. A missing folder has none.
    ///
    /// - Throws: ``SyncError/Code/ioFailed`` if the folder exists but cannot be listed.
    public func logSequences(device: String) throws(SyncError) -> [UInt64] {
        let folder = deviceFolder(device)
        let listed: [String]?
        do {
            listed = try SyncFiles.listing(of: folder)
        } catch {
            throw SyncError(.ioFailed, "cannot list the device folder", url: folder, underlying: error)
        }
        guard let names = listed else { return [] }
        return names.compactMap { name in
            if case .log(let sequence) = Self.classify(fileName: name) { return sequence }
            return nil
        }.sorted()
    }
}
