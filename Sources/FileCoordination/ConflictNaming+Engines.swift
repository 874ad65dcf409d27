import Foundation

// The engines' own spellings. Each is read from the engine's source or manual; the tests
// (FileVersionTests) name the source of every form they check.

extension ConflictNaming {
    /// Syncthing: `notes.sync-conflict-20261124-101500-ABCDEF1.md`, the date and time of the
    /// conflict (the device's local time) and the short ID (7 characters) of the device whose
    /// change lost, inserted before the last extension. A copy of a copy adds a second marker.
    public static let syncthing = ConflictNaming(engine: "Syncthing") { name in
        guard let marker = name.range(of: ".sync-conflict-", options: .backwards) else { return nil }
        let stem = name[..<marker.lowerBound]
        let rest = name[marker.upperBound...]
        let parts = rest.split(separator: "-", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, let date = NameParts.compactDate(parts[0], parts[1]) else { return nil }
        let tail = parts[2]
        let idEnd = tail.firstIndex(of: ".") ?? tail.endIndex
        let device = tail[..<idEnd]
        let ext = tail[idEnd...]
        guard device.count == 7, device.allSatisfy({ $0.isASCII && ($0.isUppercase || $0.isNumber) }),
            NameParts.isExtension(ext)
        else { return nil }
        return Match(originalName: String(stem + ext), dateComponents: date, savingComputer: String(device))
    }

    /// Dropbox: `notes (Ann's conflicted copy 2026-11-24).md`, the name of the user or computer
    /// whose change lost and the date, inserted before the extension; a second conflict the same
    /// day is numbered (`notes (Ann's conflicted copy 2026-11-24 (1)).md`), and some clients
    /// write no date (`notes (Ann's conflicted copy).md`).
    public static let dropbox = ConflictNaming(engine: "Dropbox") { name in
        guard
            let marker = name.range(of: "'s conflicted copy", options: .backwards)
                ?? name.range(of: "\u{2019}s conflicted copy", options: .backwards),
            let open = name[..<marker.lowerBound].range(of: " (", options: .backwards)
        else { return nil }
        let who = name[open.upperBound..<marker.lowerBound]
        guard !who.isEmpty else { return nil }
        var rest = name[marker.upperBound...]
        var date: DateComponents?
        if rest.hasPrefix(" ") {
            rest = rest.dropFirst()
            guard let parsed = NameParts.dashedDate(rest.prefix(10)) else { return nil }
            date = parsed
            rest = rest.dropFirst(10)
            if rest.hasPrefix(" (") {
                // A numbered copy: " (N)" before the closing parenthesis.
                rest = rest.dropFirst(2)
                let digits = rest.prefix { $0.isASCII && $0.isNumber }
                guard !digits.isEmpty, rest.dropFirst(digits.count).hasPrefix(")") else { return nil }
                rest = rest.dropFirst(digits.count + 1)
            }
        }
        guard rest.hasPrefix(")") else { return nil }
        let ext = rest.dropFirst()
        guard NameParts.isExtension(ext) else { return nil }
        return Match(
            originalName: String(name[..<open.lowerBound] + ext),
            dateComponents: date,
            savingComputer: String(who)
        )
    }

    /// Nextcloud and ownCloud desktop clients: `notes (conflicted copy 2026-11-24 101500).md`,
    /// with the account's user name before the date in newer clients
    /// (`notes (conflicted copy Ann 2026-11-24 101500).md`), inserted before the extension;
    /// ownCloud clients before 2.5 wrote `notes_conflict-20261124-101500.md`.
    ///
    /// A case-clash copy (`(case clash from ...)`) is a different item, not a version.
    public static let nextcloud = ConflictNaming(engine: "Nextcloud") { name in
        if let marker = name.range(of: " (conflicted copy ", options: .backwards) {
            let rest = name[marker.upperBound...]
            guard let close = rest.firstIndex(of: ")") else { return nil }
            let inside = rest[..<close]
            let ext = rest[rest.index(after: close)...]
            guard inside.count >= 17, NameParts.isExtension(ext) else { return nil }
            let stamp = inside.suffix(17)
            let dateAndTime = stamp.split(separator: " ", omittingEmptySubsequences: false)
            guard dateAndTime.count == 2, let day = NameParts.dashedDate(dateAndTime[0]),
                let time = NameParts.number(dateAndTime[1], digits: 6),
                let date = NameParts.date(
                    year: day.year,
                    month: day.month,
                    day: day.day,
                    hour: time / 10_000,
                    minute: time / 100 % 100,
                    second: time % 100
                )
            else { return nil }
            let user = inside.dropLast(17)
            guard user.isEmpty || (user.hasSuffix(" ") && user.count > 1) else { return nil }
            return Match(
                originalName: String(name[..<marker.lowerBound] + ext),
                dateComponents: date,
                savingComputer: user.isEmpty ? nil : String(user.dropLast())
            )
        }
        guard let marker = name.range(of: "_conflict-", options: .backwards) else { return nil }
        let rest = name[marker.upperBound...]
        guard rest.count >= 15 else { return nil }
        let stamp = rest.prefix(15)
        let ext = rest.dropFirst(15)
        let parts = stamp.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 2, let date = NameParts.compactDate(parts[0], parts[1]), NameParts.isExtension(ext)
        else { return nil }
        return Match(originalName: String(name[..<marker.lowerBound] + ext), dateComponents: date)
    }

    /// rclone bisync: before 1.66 both sides of a conflict are renamed, to `notes.md..path1` and
    /// `notes.md..path2` (so the item itself is gone until the conflict is resolved, and either
    /// side is evidence for the other); from 1.66 the default is a numbered suffix after every
    /// extension, `notes.md.conflict1`, `notes.md.conflict2`.
    public static let rclone = ConflictNaming(engine: "rclone bisync") { name in
        for side in ["1", "2"] where name.hasSuffix("..path" + side) {
            let original = String(name.dropLast(7))
            let other = original + "..path" + (side == "1" ? "2" : "1")
            return Match(originalName: original, savingComputer: "path" + side, evidence: [original, other])
        }
        guard let marker = name.range(of: ".conflict", options: .backwards) else { return nil }
        let digits = name[marker.upperBound...]
        guard let number = NameParts.number(digits, digits: digits.count), number > 0, digits.first != "0" else {
            return nil
        }
        let original = String(name[..<marker.lowerBound])
        // With no winner both sides are renamed, with consecutive numbers.
        let neighbours = [number - 1, number + 1].filter { $0 > 0 }.map { "\(original).conflict\($0)" }
        return Match(originalName: original, evidence: [original] + neighbours)
    }

    /// unison with `-copyonconflict`: `notes (conflict_on_2026-11-24).md`, numbered when that name
    /// is taken (`notes (conflict #1_on_2026-11-24).md`), inserted before the extension; and, with
    /// `-backup` and `backuplocation = local`, backups beside the item named `.bak.1.notes.md`
    /// (1 the most recent), which are versions but not conflicts.
    ///
    /// A copy of an item the other replica deleted (`..._was_deleted)`) has no item left to be a
    /// version of, so it is never one.
    public static let unison = ConflictNaming(engine: "unison") { name in
        if name.hasPrefix(".bak.") {
            let rest = name.dropFirst(5)
            guard let dot = rest.firstIndex(of: ".") else { return nil }
            let age = rest[..<dot]
            guard let number = NameParts.number(age, digits: age.count), number > 0 else { return nil }
            return Match(originalName: String(rest[rest.index(after: dot)...]), isConflict: false)
        }
        guard let marker = name.range(of: " (conflict", options: .backwards) else { return nil }
        var rest = name[marker.upperBound...]
        if rest.hasPrefix(" #") {
            rest = rest.dropFirst(2)
            let digits = rest.prefix { $0.isASCII && $0.isNumber }
            guard !digits.isEmpty else { return nil }
            rest = rest.dropFirst(digits.count)
        }
        guard rest.hasPrefix("_on_"), let date = NameParts.dashedDate(rest.dropFirst(4).prefix(10)) else { return nil }
        rest = rest.dropFirst(14)
        guard rest.hasPrefix(")") else { return nil }
        let ext = rest.dropFirst()
        guard NameParts.isExtension(ext) else { return nil }
        return Match(originalName: String(name[..<marker.lowerBound] + ext), dateComponents: date)
    }
}
