import Foundation
import Synchronization

/// How one file-sync engine names the copies it makes of a file: its conflict copies (two devices
/// changed the file at once, and the engine kept both) and, for engines that keep them beside the
/// file, its backups.
///
/// ``FileVersion`` finds an item's versions by asking every naming in ``registered`` whether a
/// name beside the item is one of its copies. Concord ships the namings of Syncthing, Dropbox,
/// Nextcloud and ownCloud, rclone bisync and unison; an app whose files another engine carries
/// adds that engine's naming:
///
/// ```swift
/// // "notes.md~conflict~laptop" is a copy of "notes.md" made on "laptop".
/// ConflictNaming.register(ConflictNaming(engine: "MySync") { name in
///     let parts = name.components(separatedBy: "~conflict~")
///     guard parts.count == 2, !parts[0].isEmpty else { return nil }
///     return ConflictNaming.Match(originalName: parts[0], savingComputer: parts[1])
/// })
/// ```
///
/// A naming only reads names. Whether a matching file really is a copy is decided beside the
/// item: a name that matches but whose item (``Match/evidence``) is not in the same directory is
/// a look-alike and is never taken for a version.
public struct ConflictNaming: Sendable, CustomStringConvertible {
    /// What a copy's name says: the item it is a copy of, and what the engine wrote into the name.
    public struct Match: Sendable, Hashable {
        /// The name of the item this is a copy of, in the same directory.
        public var originalName: String
        /// Whether the copy records a conflict (`true`), or is a backup the engine keeps of an
        /// earlier content (`false`).
        public var isConflict: Bool
        /// The date and time the name carries (the engine's local time: no time zone), if any.
        public var dateComponents: DateComponents?
        /// The device or user the name says made the copy, if it says.
        public var savingComputer: String?
        /// Names of which at least one must be in the same directory for the file to count as a
        /// copy. Usually just ``originalName``; an engine that renames every side of a conflict
        /// (rclone bisync before 1.66) also accepts the other side.
        public var evidence: [String]

        /// Creates a match.
        ///
        /// - Parameters:
        ///   - originalName: the name of the item the copy belongs to.
        ///   - isConflict: `false` for a backup rather than a conflict copy.
        ///   - dateComponents: the date the name carries, if any.
        ///   - savingComputer: the device or user the name carries, if any.
        ///   - evidence: the names of which one must exist beside the copy; `nil` means
        ///     `[originalName]`.
        public init(
            originalName: String,
            isConflict: Bool = true,
            dateComponents: DateComponents? = nil,
            savingComputer: String? = nil,
            evidence: [String]? = nil
        ) {
            self.originalName = originalName
            self.isConflict = isConflict
            self.dateComponents = dateComponents
            self.savingComputer = savingComputer
            self.evidence = evidence ?? [originalName]
        }
    }

    /// The engine's name, for logs and for ``FileVersion/engine``.
    public let engine: String
    private let parse: @Sendable (String) -> Match?

    /// Creates a naming from a function that reads one file name (a last path component) and
    /// says whose copy it is, or returns `nil` for a name that is not one of the engine's copies.
    ///
    /// - Parameters:
    ///   - engine: the engine's name.
    ///   - match: reads a name; it must be a pure function of the name.
    public init(engine: String, match: @escaping @Sendable (_ name: String) -> Match?) {
        self.engine = engine
        self.parse = match
    }

    /// Reads `name` (a last path component): whose copy it is, if it is one of this engine's.
    /// A match whose original is `name` itself, or empty, is no match.
    public func match(_ name: String) -> Match? {
        guard let match = parse(name), !match.originalName.isEmpty, match.originalName != name,
            !match.originalName.contains("/")
        else { return nil }
        return match
    }

    /// The engine's name.
    public var description: String { "ConflictNaming(\(engine))" }

    // MARK: - The namings in use

    private static let namings = Mutex<[ConflictNaming]>(builtIn)

    /// The namings Concord ships: ``syncthing``, ``dropbox``, ``nextcloud``, ``rclone`` and
    /// ``unison``.
    public static var builtIn: [ConflictNaming] { [.syncthing, .dropbox, .nextcloud, .rclone, .unison] }

    /// The namings ``FileVersion`` and presenters use in this process: ``builtIn`` unless set.
    /// Earlier namings win when two read one name.
    public static var registered: [ConflictNaming] {
        get { namings.withLock { $0 } }
        set { namings.withLock { $0 = newValue } }
    }

    /// Adds a naming to ``registered`` (before the built-in ones, so it wins a name both read).
    public static func register(_ naming: ConflictNaming) {
        namings.withLock { $0.insert(naming, at: 0) }
    }

    /// The first registered naming that reads `name`, and what it read.
    static func firstMatch(_ name: String, in namings: [ConflictNaming]) -> (ConflictNaming, Match)? {
        for naming in namings {
            if let match = naming.match(name) { return (naming, match) }
        }
        return nil
    }
}

/// Small pieces the built-in namings share.
enum NameParts {
    /// Splits `name` at its last `.`, as most engines find an extension: `("notes", ".md")`;
    /// a name without a dot, or whose only dot leads it (`.bashrc`), has no extension.
    static func splitExtension(_ name: String) -> (stem: Substring, ext: Substring) {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else {
            return (name[...], name[name.endIndex...])
        }
        return (name[..<dot], name[dot...])
    }

    /// Whether `text` is a plausible extension: empty, or a dot and no other dot.
    static func isExtension(_ text: Substring) -> Bool {
        text.isEmpty || (text.first == "." && text.dropFirst().allSatisfy { $0 != "." })
    }

    /// Reads exactly `count` ASCII digits as a number.
    static func number(_ text: Substring, digits count: Int) -> Int? {
        guard text.count == count, text.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return Int(text)
    }

    /// A date and time from its parts, or `nil` when they name no real day or time (month 13,
    /// February 30, hour 24).
    static func date(
        year: Int?,
        month: Int?,
        day: Int?,
        hour: Int? = nil,
        minute: Int? = nil,
        second: Int? = nil
    ) -> DateComponents? {
        guard let year, let month, let day, (1...12).contains(month), day >= 1 else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        guard let first = calendar.date(from: DateComponents(year: year, month: month, day: 1)),
            let days = calendar.range(of: .day, in: .month, for: first), days.contains(day)
        else { return nil }
        if let hour, !(0..<24).contains(hour) { return nil }
        if let minute, !(0..<60).contains(minute) { return nil }
        if let second, !(0..<61).contains(second) { return nil }
        return DateComponents(year: year, month: month, day: day, hour: hour, minute: minute, second: second)
    }

    /// `YYYYMMDD` and `HHMMSS`.
    static func compactDate(_ date: Substring, _ time: Substring) -> DateComponents? {
        guard date.count == 8, time.count == 6 else { return nil }
        return Self.date(
            year: number(date.prefix(4), digits: 4),
            month: number(date.dropFirst(4).prefix(2), digits: 2),
            day: number(date.suffix(2), digits: 2),
            hour: number(time.prefix(2), digits: 2),
            minute: number(time.dropFirst(2).prefix(2), digits: 2),
            second: number(time.suffix(2), digits: 2)
        )
    }

    /// `YYYY-MM-DD`.
    static func dashedDate(_ text: Substring) -> DateComponents? {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        return date(
            year: number(parts[0], digits: 4),
            month: number(parts[1], digits: 2),
            day: number(parts[2], digits: 2)
        )
    }
}
