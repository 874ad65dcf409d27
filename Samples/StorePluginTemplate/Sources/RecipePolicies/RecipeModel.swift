// RecipePolicies: entity policies for a small recipe app, as a template.
//
// Every rule an app gives its entities, in one place each:
//
// | file                    | policy                               | protocol                    |
// | ----------------------- | ------------------------------------ | --------------------------- |
// | RecipeModel.swift       | the schema, and `register(on:)`      |                             |
// | RecipeRepair.swift      | validation repair                    | `ValidationRepairPolicy`    |
// | KitchenSingleton.swift  | a singleton                          | `UniquenessPolicy`          |
// | CategoryByName.swift    | duplicates, a deterministic winner   | `UniquenessPolicy`          |
// | NewestEditWins.swift    | a merge policy                       | `MergeConflictResolver`     |
// | RecipeHooks.swift       | origin-aware hooks                   | `EntityHooks`               |
//
// Nothing here depends on a store plugin: the tests run it on FolderStore (this package's store
// plugin), and an app runs it on whichever store it opens.
import Foundation
import Persistence

/// The recipe app's data model and the registration of its policies.
public enum RecipeModel {
    /// - `Kitchen`: the app's settings, one record (``KitchenSingleton``): `units`, `created`.
    /// - `Category`: `name`, `created`; its `recipes` (deleting a category leaves its recipes
    ///   without one, which ``RecipeRepair`` mends).
    /// - `Recipe`: `title`, `servings`, `created`, `edited`; a required `category`.
    public static let schema: Schema = {
        do {
            return try Schema(
                version: 1,
                entities: [
                    EntityDescription(
                        "Kitchen",
                        attributes: [
                            AttributeDescription("units", .string, defaultValue: .string("metric")),
                            AttributeDescription("created", .date),
                        ]
                    ),
                    EntityDescription(
                        "Category",
                        attributes: [AttributeDescription("name", .string), AttributeDescription("created", .date)],
                        relationships: [
                            RelationshipDescription("recipes", to: "Recipe", inverse: "category", isToMany: true)
                        ]
                    ),
                    EntityDescription(
                        "Recipe",
                        attributes: [
                            AttributeDescription("title", .string),
                            AttributeDescription("servings", .integer, defaultValue: .integer(2)),
                            AttributeDescription("created", .date),
                            AttributeDescription("edited", .date),
                        ],
                        relationships: [
                            RelationshipDescription("category", to: "Category", inverse: "recipes", isOptional: false)
                        ]
                    ),
                ]
            )
        } catch {
            fatalError("the recipe schema is invalid: \(error)")
        }
    }()

    /// The category every device has under the same id (a deterministic id: two devices that
    /// create it make one record), where recipes whose category was deleted go.
    public static let uncategorizedID = ObjectID.deterministic(entity: "Category", name: "Uncategorized")

    /// The Uncategorized category as every device creates it: the same id and values.
    public static func uncategorized() -> Record {
        Record(
            id: uncategorizedID,
            values: ["name": "Uncategorized", "created": .date(Date(timeIntervalSince1970: 0))]
        )
    }

    /// Registers the app's policies on `coordinator` (once, at startup). Hooks belong to
    /// contexts: pass ``RecipeHooks`` to each `ObjectContext` the app makes (``context(_:origin:)``).
    public static func register(on coordinator: StoreCoordinator) {
        coordinator.policies.register(RecipeRepair())
        coordinator.policies.register(KitchenSingleton())
        coordinator.policies.register(CategoryByName())
    }

    /// A context with the app's hooks and merge policy: what every part of the app should use.
    /// `now` is the hooks' clock.
    public static func context(
        _ coordinator: StoreCoordinator,
        origin: ChangeOrigin = .local,
        name: String? = nil,
        now: @escaping @Sendable () -> Date = { Date() }
    ) -> ObjectContext {
        let context = ObjectContext(
            coordinator: coordinator,
            origin: origin,
            name: name,
            hooks: [RecipeHooks(now: now)]
        )
        context.mergePolicy = .custom(NewestEditWins())
        return context
    }
}
